// The console's words in English and Spanish. The language is the browser's first one
// we speak, unless the user chose another with the switch (kept in localStorage: it is
// not a secret).

const words = {
  en: {
    title: 'Relay console',
    signIn: 'Sign in',
    signOut: 'Sign out',
    tokenLabel: 'API token',
    tokenHelp: 'Your token stays in this browser tab only and is sent to this relay alone.',
    signInFailed: 'This token was not accepted: {message}',
    signedInAs: 'Signed in: {scope}',
    scopeAdmin: 'operator (every account)',
    scopeAccount: 'account {account}',
    language: 'Language',
    eventbridge: 'Amazon EventBridge',
    kinesis: 'Amazon Kinesis',
    pubsub: 'Google Pub/Sub',
    connectorsHint: 'Choose a connector to see its destinations.',
    noDestinations: 'No destinations under this connector.',
    loading: 'Loading…',
    account: 'Account',
    busArn: 'Event bus',
    streamArn: 'Stream',
    kmsKeyArn: 'KMS key',
    roleArn: 'Your role',
    projectId: 'Project',
    topicId: 'Topic',
    externalId: 'ExternalId',
    ourRole: 'Our role (principal)',
    trustPolicy: 'Trust policy (on your role)',
    permissionsPolicy: 'Permissions policy (on your role)',
    kmsStatement: 'KMS key policy statement',
    noKms: 'No KMS key: nothing to add to a key policy.',
    serviceAccount: 'Our service account',
    commands: 'Run these three commands',
    copy: 'Copy',
    copied: 'Copied',
    copyFailed: 'Select and copy by hand',
    status: 'Status',
    status_active: 'Active',
    status_pending: 'Pending setup',
    pendingCheck: 'Setup missing',
    status_refused: 'Refused: role lets others in',
    pendingRefused: 'Refused for security',
    nextCheck: 'next check',
    status_paused: 'Paused',
    status_disabled: 'Disabled',
    consecutiveFailures: 'Consecutive failures',
    failuresLeft: '{count} (disabled after {left} more)',
    failuresNone: '0',
    lastFailure: 'Last failure',
    lastDelivery: 'Last delivery',
    never: 'none yet',
    class_not_taken: 'not taken (retrying)',
    class_rejected: 'rejected',
    disabledSince: 'Disabled',
    event: 'event',
    sendTest: 'Send a test',
    sending: 'Sending…',
    pause: 'Pause',
    activate: 'Activate',
    disable: 'Disable',
    outcome_delivered: 'delivered',
    outcome_not_taken: 'not taken',
    outcome_rejected: 'rejected',
    outcome_expired: 'expired',
    outcome_replayed: 'replay asked for',
    outcome_retry_queued: 'retry asked for',
    testOutcome: 'Test: {outcome}',
    attempts: 'Attempt log',
    attemptsEmpty: 'No attempts recorded.',
    older: 'Older attempts',
    at: 'When',
    outcome: 'Outcome',
    message: 'Message',
    eventId: 'Event',
    live_connecting: 'connecting',
    live_live: 'live',
    live_reconnecting: 'reconnecting',
    'live_catching-up': 'catching up',
    live_stopped: 'stopped',
    disableTitle: 'Disable {id}?',
    disableCascade: 'These destinations will be disabled together (same account, same {scope}):',
    disableOnlyThis: 'Only this destination will be disabled.',
    disableReason: 'Reason (shown on the cards)',
    disableConfirm: 'Disable',
    cancel: 'Cancel',
    disabledIds: 'Disabled: {ids}',
    actionFailed: '{code}: {message}',
    notAllowed: 'This token may not do that: {message}',
  },
  es: {
    title: 'Consola del relay',
    signIn: 'Iniciar sesión',
    signOut: 'Cerrar sesión',
    tokenLabel: 'Token de la API',
    tokenHelp: 'Su token se queda solo en esta pestaña y se envía solo a este relay.',
    signInFailed: 'No se aceptó este token: {message}',
    signedInAs: 'Sesión iniciada: {scope}',
    scopeAdmin: 'operador (todas las cuentas)',
    scopeAccount: 'cuenta {account}',
    language: 'Idioma',
    eventbridge: 'Amazon EventBridge',
    kinesis: 'Amazon Kinesis',
    pubsub: 'Google Pub/Sub',
    connectorsHint: 'Elija un conector para ver sus destinos.',
    noDestinations: 'No hay destinos en este conector.',
    loading: 'Cargando…',
    account: 'Cuenta',
    busArn: 'Bus de eventos',
    streamArn: 'Stream',
    kmsKeyArn: 'Clave KMS',
    roleArn: 'Su rol',
    projectId: 'Proyecto',
    topicId: 'Tema',
    externalId: 'ExternalId',
    ourRole: 'Nuestro rol (principal)',
    trustPolicy: 'Política de confianza (en su rol)',
    permissionsPolicy: 'Política de permisos (en su rol)',
    kmsStatement: 'Declaración para la política de la clave KMS',
    noKms: 'Sin clave KMS: nada que añadir a una política de clave.',
    serviceAccount: 'Nuestra cuenta de servicio',
    commands: 'Ejecute estos tres comandos',
    copy: 'Copiar',
    copied: 'Copiado',
    copyFailed: 'Selecciónelo y cópielo a mano',
    status: 'Estado',
    status_active: 'Activo',
    status_pending: 'Pendiente de configurar',
    pendingCheck: 'Falta en la configuración',
    status_refused: 'Rechazado: el rol deja entrar a otros',
    pendingRefused: 'Rechazado por seguridad',
    nextCheck: 'próxima comprobación',
    status_paused: 'En pausa',
    status_disabled: 'Desactivado',
    consecutiveFailures: 'Fallos consecutivos',
    failuresLeft: '{count} (se desactiva tras {left} más)',
    failuresNone: '0',
    lastFailure: 'Último fallo',
    lastDelivery: 'Última entrega',
    never: 'ninguna todavía',
    class_not_taken: 'no aceptado (reintentando)',
    class_rejected: 'rechazado',
    disabledSince: 'Desactivado',
    event: 'evento',
    sendTest: 'Enviar una prueba',
    sending: 'Enviando…',
    pause: 'Pausar',
    activate: 'Activar',
    disable: 'Desactivar',
    outcome_delivered: 'entregado',
    outcome_not_taken: 'no aceptado',
    outcome_rejected: 'rechazado',
    outcome_expired: 'caducado',
    outcome_replayed: 'repetición pedida',
    outcome_retry_queued: 'reintento pedido',
    testOutcome: 'Prueba: {outcome}',
    attempts: 'Registro de intentos',
    attemptsEmpty: 'No hay intentos registrados.',
    older: 'Intentos anteriores',
    at: 'Cuándo',
    outcome: 'Resultado',
    message: 'Mensaje',
    eventId: 'Evento',
    live_connecting: 'conectando',
    live_live: 'en vivo',
    live_reconnecting: 'reconectando',
    'live_catching-up': 'poniéndose al día',
    live_stopped: 'detenido',
    disableTitle: '¿Desactivar {id}?',
    disableCascade: 'Estos destinos se desactivarán juntos (misma cuenta, mismo {scope}):',
    disableOnlyThis: 'Solo se desactivará este destino.',
    disableReason: 'Motivo (se muestra en las tarjetas)',
    disableConfirm: 'Desactivar',
    cancel: 'Cancelar',
    disabledIds: 'Desactivados: {ids}',
    actionFailed: '{code}: {message}',
    notAllowed: 'Este token no puede hacer eso: {message}',
  },
};

export const languages = Object.keys(words);

// pickLanguage returns the saved choice, else the browser's first language we speak.
export function pickLanguage() {
  const saved = localStorage.getItem('relay.lang');
  if (saved && words[saved]) return saved;
  for (const l of navigator.languages || [navigator.language || 'en']) {
    const base = String(l).toLowerCase().split('-')[0];
    if (words[base]) return base;
  }
  return 'en';
}

let current = pickLanguage();

export function language() { return current; }

// setLanguage switches to lang; save keeps it as the user's choice for the next visits
// (only the switch saves: the browser's language is read afresh each time otherwise).
export function setLanguage(lang, save = false) {
  if (!words[lang]) return;
  current = lang;
  if (save) localStorage.setItem('relay.lang', lang);
  document.documentElement.lang = lang;
}

// t returns the word for key in the current language, with {name} filled from vars.
export function t(key, vars = {}) {
  const s = words[current][key] ?? words.en[key] ?? key;
  return s.replace(/\{(\w+)\}/g, (_, k) => String(vars[k] ?? ''));
}

// formatTime shows an RFC 3339 time in the user's language and zone.
export function formatTime(at) {
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return String(at);
  return d.toLocaleString(current);
}
