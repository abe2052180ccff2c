package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/mercamap/relay"
	"github.com/mercamap/relay/internal/api"
	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/console"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/ingest"
	"github.com/mercamap/relay/internal/lag"
	"github.com/mercamap/relay/internal/notify"
	"github.com/mercamap/relay/internal/registry"
	"github.com/mercamap/relay/internal/signature"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/stream"
	"github.com/mercamap/relay/internal/tracing"
	"github.com/mercamap/relay/internal/upgrade"
)

func serveCmd(e env) *cobra.Command {
	var path, logLevel string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the relay: ingest from RabbitMQ, deliver to destinations, serve the API",
		Long: `serve loads the config (refusing to start on any problem check-config reports),
consumes the job-events queue, stores each verified event in Redis before acking it,
delivers to the destinations it holds leases for, and serves the operator API on
api.listen. SIGHUP re-reads the config: accounts (routing), destinations and API tokens
change at once (a file with problems is refused whole, each problem logged, and the
running config kept). A config that would change an ExternalId Redis already holds is
refused the same way, at start and on reload, and so is an AWS destination whose
ExternalId would live only in Redis: pin it (relay external-ids prints the pins) or set
identity.external_id_secret. While Redis does not answer at start, or fails what the
start reads and writes (a failover), it waits and tries again, /readyz saying why. It runs until
SIGINT or SIGTERM, when it finishes the messages and writes in hand, ends API streams
and exits.

/metrics answers on its own listener, api.metrics_listen (default 127.0.0.1:9090), with
/healthz and /readyz; none takes a token, and /metrics names every account and
destination: keep that listener private (only the scraper and the probes reach it).
api.listen serves the API, the console, /healthz and /readyz, never /metrics.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log := slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: level}))
			routeLibraryLogs(log)
			cfg, err := config.Load(path, e.getenv)
			if err != nil {
				return err
			}
			logWarnings(log, cfg)
			// Before Redis is waited for: the file alone decides it.
			if problems := cfg.UnkeptExternalIDs(path); len(problems) > 0 {
				return problems
			}
			return serve(cmd.Context(), e, path, cfg, log)
		},
	}
	cmd.Flags().StringVar(&path, "config", "relay.yaml", "path of the YAML config")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

func serve(ctx context.Context, e env, path string, cfg *config.Config, log *slog.Logger) error {
	// Caught from the start: SIGHUP's default action would end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// Ingest ending with an error (a queue the broker holds with other arguments) stops
	// everything, the way SIGTERM does, and serve exits with that error.
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	so := storeOptions(cfg.Redis)
	so.Bounds = store.Bounds{ChannelEvents: cfg.Delivery.ChannelMaxEvents, Attempts: cfg.Delivery.AttemptsMax}
	st, err := store.Connect(so)
	if err != nil {
		return fmt.Errorf("redis.url: %w", err)
	}
	defer st.Close()
	// A deleted destination's channel counter outlives every cursor of its channel a
	// follower may still rightly hold (delivery.channel_retention), and a day at least.
	st.SetDeletedCounterLife(max(24*time.Hour, cfg.Delivery.ChannelRetention))
	reg := prometheus.NewRegistry()
	// The Go runtime, the process (CPU, memory, open files) and the build's version.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(), buildInfo())
	tracer, err := tracing.New(cfg.Tracing, tracing.Options{Queue: cfg.RabbitMQ.Queue,
		Instance: podName(e.getenv), PodName: e.getenv("POD_NAME"), Version: relay.Version()})
	if err != nil {
		return err
	}
	var ingestTracer ingest.Tracer
	var dispatchTracer dispatch.Tracer
	var stsTracer assume.Tracer
	if tracer != nil {
		ingestTracer, dispatchTracer, stsTracer = tracer, tracer, tracer
		defer shutdownTracer(tracer, log)
	}
	sinks, closeSinks, err := buildSinks(ctx, cfg, reg, log, stsTracer, st.Limiter())
	if err != nil {
		return err
	}
	defer closeSinks()
	owner := replicaName()
	// The roll's part: this release's heartbeat, the start's checks, the state format.
	var keeperErr error
	keeper := upgrade.New(upgrade.Options{Store: st, Owner: owner, Release: thisRelease(), Known: knownReleases(),
		TTL: cfg.Delivery.LeaseTTL, Logger: log.With("component", "upgrade"), Registerer: reg,
		Stop: func(err error) { keeperErr = err; stop() }, Rewrites: upgrade.ReleaseRewrites(st)})
	st.SetStateFormat(keeper.Writes) // what only a later format may write waits for its switch
	// Operator events wait in Redis outboxes until the broker confirms them.
	outbox := notify.New(notify.Options{URLs: cfg.RabbitMQ.URLs, Exchange: cfg.Delivery.OperatorEventsExchange,
		Store: st, Consumer: owner, Logger: log.With("component", "notify"), Metrics: notify.NewMetrics(reg)})
	outbox.SetAccounts(accountIDs(cfg.Accounts))
	disp := dispatch.New(dispatch.Options{
		Store:    st,
		Sinks:    sinks,
		Delivery: cfg.Delivery,
		Owner:    owner,
		Accounts: cfg.Accounts,
		Outbox:   outbox,
		Logger:   log.With("component", "dispatch"),
		// The logs keep what every destination passed for the replay window (trimmed by
		// dispatch; ingest's LogRetention, the dedup window, bounds everything): replays
		// reach that far.
		LogRetention: cfg.LogReplayWindow(),
		Metrics:      dispatch.NewMetrics(reg),
		Tracer:       dispatchTracer,
		StateFormat:  keeper.Writes,
	})
	consumer := ingest.New(ingest.Options{
		URLs: cfg.RabbitMQ.URLs,
		Topology: ingest.Topology{
			Exchange:           cfg.RabbitMQ.Exchange,
			Queue:              cfg.RabbitMQ.Queue,
			RoutingKeys:        cfg.RabbitMQ.RoutingKeys,
			QuarantineExchange: cfg.RabbitMQ.QuarantineExchange,
			QuarantineQueue:    cfg.RabbitMQ.QuarantineQueue,
			Quarantine: ingest.QuarantineBounds{
				MaxBytes:     cfg.RabbitMQ.Quarantine.MaxBytes,
				MaxMessages:  cfg.RabbitMQ.Quarantine.MaxMessages,
				MaxBodyBytes: cfg.RabbitMQ.Quarantine.MaxBodyBytes,
			},
			Partitions: cfg.RabbitMQ.Partitions,
		},
		Prefetch: cfg.RabbitMQ.Prefetch,
		Verifier: signature.Verifier{
			Keys:      cfg.Signature.Keys,
			MaxAge:    cfg.Signature.MaxAge,
			MaxFuture: cfg.Signature.MaxFuture,
		},
		Store:        st,
		Router:       cfg,
		DedupWindow:  cfg.DedupWindow,
		LogRetention: cfg.DedupWindow,
		Logger:       log.With("component", "ingest"),
		Metrics:      ingest.NewMetrics(reg),
		Local:        disp,
		AfterAppend:  failpoint(e.getenv("RELAY_TEST_FAILPOINT")),
		Tracer:       ingestTracer,
	})
	streams := stream.New(stream.Options{Store: st, Directory: disp, Identity: cfg.Identity,
		Window: cfg.Delivery.InFlight, Logger: log.With("component", "stream")})
	// The destinations the API made: in Redis, beside the logs; every replica follows them.
	src := &apiSource{reg: registry.New(st.Client()), disp: disp, log: log.With("component", "registry")}
	apiSrv := api.New(api.Options{Config: cfg, Destinations: disp, Store: st, Streams: streams,
		Registry: src.reg, ConfigPath: path, Gatherer: reg, Registerer: reg, Broker: consumer.Connected, Logger: log.With("component", "api"),
		Console: console.New(console.Options{DisableAfter: cfg.Delivery.DisableAfter})})
	registerWatchMetrics(reg, st, consumer, lag.New(lag.Options{Store: st, Held: disp.Held, Logger: log.With("component", "lag")}))
	ln, err := net.Listen("tcp", cfg.API.Listen)
	if err != nil {
		return fmt.Errorf("api.listen: %w", err)
	}
	// /metrics names every account: it has its own listener, kept private.
	metricsLn, err := net.Listen("tcp", cfg.API.MetricsListen)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("api.metrics_listen: %w", err)
	}
	// Timeouts, the body bound and the connection caps of api: (see api.HTTPServer).
	ln = apiSrv.Listener(ln)
	// Its own cap of max_connections too: no request there carries a token, so past the
	// cap the oldest connection goes, and a scrape or a probe always gets in.
	metricsLn = apiSrv.Listener(metricsLn)
	errorLog := slog.NewLogLogger(log.With("component", "api").Handler(), slog.LevelWarn)
	httpSrv := apiSrv.HTTPServer(errorLog)
	// Shutdown waits for handlers, and a subscription never ends on its own.
	httpSrv.RegisterOnShutdown(apiSrv.CloseStreams)
	metricsSrv := apiSrv.MetricsHTTPServer(errorLog)

	// The listeners serve from here on, before Redis answers: /healthz says the process
	// lives, /readyz says why it does not serve yet (apiSrv.Starting), /metrics shows
	// relay_redis_up 0. A start that fails below stops them before serve returns.
	apiSrv.Starting("connecting to Redis")
	var httpWG sync.WaitGroup
	defer httpWG.Wait()
	defer stop()
	httpWG.Add(3)
	go func() {
		defer httpWG.Done()
		if err := httpSrv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("api server stopped", "error", err)
		}
	}()
	go func() {
		defer httpWG.Done()
		if err := metricsSrv.Serve(metricsLn); !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err)
		}
	}()
	go func() {
		defer httpWG.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), apiShutdownTimeout)
		defer cancel()
		_ = metricsSrv.Close() // a scrape needs no draining
		if err := httpSrv.Shutdown(sctx); err != nil {
			log.Warn("api requests still running at shutdown; closing them", "error", err)
			_ = httpSrv.Close()
		}
	}()

	rl := &reloader{path: path, getenv: e.getenv, log: log, ingest: consumer, disp: disp, outbox: outbox, api: apiSrv,
		current: cfg, store: st, src: src}
	src.onAccounts = rl.applyAccounts
	// Redis may come up after the relay (a pod restarted beside it), or fail over while
	// it starts (a master down, a replica promoted): wait and read again rather than
	// exit, since nothing can be stored or delivered without it. Only what the file must
	// fix (an ExternalId it would change) stops the start.
	var all []destination.Destination
	for wait := redisWaitFirst; ; wait = min(2*wait, redisWaitMax) {
		if err := waitForRedis(ctx, st, log, apiSrv.Starting); err != nil {
			return err
		}
		// Before anything is written: may this release run beside the others?
		err := keeper.Start(ctx)
		var refused *upgrade.RefusedError
		if errors.As(err, &refused) {
			return err
		}
		var problems config.Problems
		var loaded []destination.Destination
		if err == nil {
			problems, loaded, err = startFromRedis(ctx, st, cfg, rl)
		}
		if len(problems) > 0 {
			return problems
		}
		if err == nil {
			all = loaded
			break
		}
		log.Warn("redis answered, then failed while the relay read its state; waiting before reading again", "component", "store",
			"retry_in", wait.String(), "error", err.Error())
		apiSrv.Starting(fmt.Sprintf("waiting for Redis: %v (next try in %s)", err, wait))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
	apiSrv.Started()

	log.Info("relay starting", "version", relay.Version(), "state_format", keeper.Writes(), "accounts", len(cfg.Accounts), "destinations", len(all), "api_destinations", len(all)-len(cfg.Destinations),
		"api", ln.Addr().String(), "metrics", metricsLn.Addr().String())
	var wg sync.WaitGroup
	var ingestErr error
	wg.Add(6)
	go func() { defer wg.Done(); src.run(ctx) }()
	go func() { defer wg.Done(); keeper.Run(ctx) }()
	go func() {
		defer wg.Done()
		if ingestErr = consumer.Run(ctx); ingestErr != nil {
			log.Error("ingest cannot run; the relay stops", "component", "ingest", "error", ingestErr)
			stop()
		}
	}()
	go func() { defer wg.Done(); _ = disp.Run(ctx) }()
	go func() { defer wg.Done(); _ = outbox.Run(ctx) }()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				rl.reload(ctx)
			}
		}
	}()
	wg.Wait()
	httpWG.Wait()
	log.Info("relay stopped")
	if keeperErr != nil {
		return keeperErr
	}
	return ingestErr
}

// apiShutdownTimeout bounds how long a stopping relay waits for API calls in flight
// (a test send waits for its one write).
const apiShutdownTimeout = 10 * time.Second

// reloader applies a re-read config on SIGHUP.
type reloader struct {
	path    string
	getenv  func(string) string
	log     *slog.Logger
	ingest  *ingest.Consumer
	disp    *dispatch.Dispatcher
	outbox  *notify.Drainer
	api     *api.Server
	current *config.Config
	store   *store.Store // to refuse a file that would change an issued ExternalId
	src     *apiSource   // the API's accounts and destinations, kept through every reload

	mu sync.Mutex // applyAccounts and reload, one at a time
}

// applyAccounts routes the file's accounts and the API's (the file's win on an id):
// ingest, delivery's store id paths, the outbox drainer and the API take them.
func (r *reloader) applyAccounts() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applyAccountsLocked(r.current)
}

func (r *reloader) applyAccountsLocked(file *config.Config) {
	merged := file.WithAccounts(r.src.accountList())
	r.disp.SetAccounts(merged.Accounts)
	r.outbox.SetAccounts(accountIDs(merged.Accounts))
	r.ingest.SetRouter(merged)
	r.api.Reload(merged)
}

// reload re-reads the file. A file with problems is refused whole and the running config
// kept. Otherwise the new config is applied to delivery, ingest routing and the API, in
// that order, before "config reloaded" is logged:
//   - the dispatcher takes the destinations (a new one's cursor is put at the end of its
//     account's log; work in flight finishes; a removed or redefined destination's worker
//     stops at its next step) and the accounts' store id paths;
//   - ingest routes by the new accounts from its next batch (SetRouter waits for the batch
//     in hand), so every event it takes after the line goes to the accounts configured
//     then, and lands after the new destinations' cursors;
//   - the outbox drainer empties the new accounts' outboxes;
//   - the API takes the tokens, accounts and identity.
//
// A removed account's log and destination state stay in Redis; its events are unrouted
// from then on. Nothing secret is logged: problems never hold values.
func (r *reloader) reload(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := config.Load(r.path, r.getenv)
	if err != nil {
		var problems config.Problems
		if errors.As(err, &problems) {
			for _, p := range problems {
				r.log.Error("config reload refused; the running config stays", "problem", p.String())
			}
		} else {
			r.log.Error("config reload refused; the running config stays", "error", err)
		}
		return
	}
	logWarnings(r.log, next)
	if problems := next.UnkeptExternalIDs(r.path); len(problems) > 0 {
		for _, p := range problems {
			r.log.Error("config reload refused; the running config stays", "problem", p.String())
		}
		return
	}
	if problems, err := externalIDProblems(ctx, r.store, next); err != nil || len(problems) > 0 {
		for _, p := range problems {
			r.log.Error("config reload refused; the running config stays", "problem", p.String())
		}
		if err != nil {
			r.log.Error("config reload refused: ExternalIds not read from redis; the running config stays", "error", err)
		}
		return
	}
	if err := r.src.setDestinations(next.Destinations, func(all []destination.Destination) error {
		return r.disp.SetDestinations(ctx, all)
	}); err != nil {
		r.log.Error("config reload refused: destination state not written; the running config stays", "error", err)
		return
	}
	r.applyAccountsLocked(next)
	for _, setting := range restartOnly(r.current, next) {
		r.log.Warn("config change takes effect at the next restart", "setting", setting)
	}
	r.current = next
	r.log.Info("config reloaded", "destinations", len(next.Destinations), "accounts", len(next.Accounts),
		"tokens", len(next.API.Tokens))
}

// restartOnly names the settings that differ between two configs and that the running
// process cannot change: connections, verification, delivery timings and our identity
// in the sinks.
func restartOnly(old, next *config.Config) []string {
	var out []string
	check := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, name)
		}
	}
	check("redis", old.Redis, next.Redis)
	check("rabbitmq", old.RabbitMQ, next.RabbitMQ)
	check("signature", old.Signature, next.Signature)
	check("dedup_window", old.DedupWindow, next.DedupWindow)
	check("api.listen", old.API.Listen, next.API.Listen)
	check("api.metrics_listen", old.API.MetricsListen, next.API.MetricsListen)
	check("api timeouts, max_body_bytes and the connection and request caps", old.API.HTTP, next.API.HTTP)
	check("aws", old.AWS, next.AWS)
	check("gcp", old.GCP, next.GCP)
	check("delivery", old.Delivery, next.Delivery)
	// identity.aws_template_url is the cards' alone (their quick-create links).
	sinks := func(id destination.Identity) destination.Identity { id.AWSTemplateURL = ""; return id }
	check("identity (the sinks'; cards show the new one now)", sinks(old.Identity), sinks(next.Identity))
	check("tracing", old.Tracing, next.Tracing)
	return out
}

// accountIDs lists the accounts' ids: the outboxes the drainer empties.
func accountIDs(accounts []config.Account) []string {
	ids := make([]string, len(accounts))
	for i, a := range accounts {
		ids[i] = a.ID
	}
	return ids
}

// logWarnings logs what the config holds that is worth fixing (a secret file others can
// read); a warning names a path, never a secret.
func logWarnings(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings {
		log.Warn("config warning", "warning", w.String())
	}
}

// podName is the replica's name for traces (service.instance.id): POD_NAME (the chart
// sets it from the downward API), else HOSTNAME, else the host's name.
func podName(getenv func(string) string) string {
	if n := getenv("POD_NAME"); n != "" {
		return n
	}
	if n := getenv("HOSTNAME"); n != "" {
		return n
	}
	n, _ := os.Hostname()
	return n
}

// replicaName names this process in destination leases: unique per start.
func replicaName() string {
	host, _ := os.Hostname()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}

// failpoint returns the hook a failure drill asks for through RELAY_TEST_FAILPOINT:
// "kill-after-append" dies by SIGKILL once a batch is in Redis and before it is acked.
func failpoint(name string) func() {
	if name != "kill-after-append" {
		return nil
	}
	return func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
}

// storeOptions is the store's view of the redis section: one server or a cluster.
func storeOptions(r config.Redis) store.Options {
	return store.Options{URL: r.URL, Cluster: r.Cluster, MinReplicas: r.MinReplicas}
}

// Redis at start: the first wait after a refused PING, the longest, and one PING's bound.
const (
	redisWaitFirst = 500 * time.Millisecond
	redisWaitMax   = 15 * time.Second
	redisPingLimit = 3 * time.Second
)

// startFromRedis reads what a start needs from Redis: the ExternalIds issued (problems
// when the file would change one), the accounts and destinations the API made, routed
// before anything is consumed, and every destination's state, ensured. A Redis error
// leaves nothing half-applied that a second call does not redo.
func startFromRedis(ctx context.Context, st *store.Store, cfg *config.Config, rl *reloader) (config.Problems, []destination.Destination, error) {
	if problems, err := externalIDProblems(ctx, st, cfg); err != nil || len(problems) > 0 {
		if err != nil {
			err = fmt.Errorf("read ExternalIds from redis: %w", err)
		}
		return problems, nil, err
	}
	all, err := rl.src.load(ctx, cfg.Destinations)
	if err != nil {
		return nil, nil, fmt.Errorf("read the destinations the api made from redis: %w", err)
	}
	rl.applyAccounts()
	if err := rl.disp.SetDestinations(ctx, all); err != nil {
		return nil, nil, fmt.Errorf("load destination state from redis: %w", err)
	}
	return nil, all, nil
}

// waitForRedis returns once Redis answers PING, logging each failed try with the wait
// before the next (doubling up to redisWaitMax) and telling starting (what /readyz
// says) why; it ends with ctx (SIGTERM while waiting).
func waitForRedis(ctx context.Context, st *store.Store, log *slog.Logger, starting func(reason string)) error {
	wait := redisWaitFirst
	for try := 1; ; try++ {
		pctx, cancel := context.WithTimeout(ctx, redisPingLimit)
		err := st.Client().Ping(pctx).Err()
		cancel()
		if err == nil {
			if try > 1 {
				log.Info("redis answers; the relay starts", "component", "store", "tries", try)
			}
			return nil
		}
		// go-redis errors name the address, never the password of the URL.
		log.Warn("redis does not answer; waiting before the next try", "component", "store",
			"try", try, "retry_in", wait.String(), "error", err.Error())
		starting(fmt.Sprintf("waiting for Redis: it did not answer PING (try %d, next in %s): %v", try, wait, err))
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis never answered (%d tries): %w", try, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, redisWaitMax)
	}
}
