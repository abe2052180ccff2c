// The page's elements as the console's modules use them: index.html's ids name inputs,
// dialogs, buttons and templates, so getElementById answers any of them, and a
// querySelectorAll of the page's [data-*] elements reads their dataset.
interface Document {
  getElementById(elementId: string): any;
}
interface Element {
  readonly dataset: DOMStringMap;
  value: any;
}
