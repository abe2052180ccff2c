package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/testpeer"
)

// setupCard is a card's setup as the API answers it (issue 55's forms beside the policies).
type setupCard struct {
	ExternalID string `json:"external_id"`
	Setup      struct {
		CloudFormation string   `json:"cloudformation"`
		Terraform      string   `json:"terraform"`
		AWSCLI         []string `json:"aws_cli"`
		QuickCreateURL *string  `json:"quick_create_url"`
		Commands       []string `json:"commands"`
	} `json:"setup"`
}

// TestConsoleCardSetupTabsCopyTheCloudFormationTemplate: the customer, signed in by a
// link, finds each card's setup as tabs — Policies, CloudFormation, Terraform, AWS CLI
// on an AWS card, gcloud and Terraform on a Pub/Sub card — in English and in Spanish;
// switches to CloudFormation and copies exactly the card's setup.cloudformation; gets
// the template to download (no identity.aws_template_url here, so no Launch stack);
// copies Terraform and the AWS CLI commands as the card has them; and, the role made
// from the copied policies, presses the Send a test that follows the tabs: delivered.
func TestConsoleCardSetupTabsCopyTheCloudFormationTemplate(t *testing.T) {
	testpeer.Need(t, "chromium")
	r := startConsoleRig(t, "")
	var bus, topic setupCard
	getJSON(t, r.apis[0]+"/v1/connectors/eventbridge/destinations/orders-bus", consoleAdminToken, &bus)
	getJSON(t, r.apis[0]+"/v1/connectors/pubsub/destinations/orders-topic", consoleAdminToken, &topic)
	if bus.Setup.CloudFormation == "" || bus.Setup.Terraform == "" || len(bus.Setup.AWSCLI) != 2 || topic.Setup.Terraform == "" {
		t.Fatalf("the API's cards lack the setup's forms: orders-bus %+v, orders-topic %+v", bus.Setup, topic.Setup)
	}

	page := r.tab(r.apis[1], "en-US")
	r.signInByLink(page, r.apis[1], r.apis[0], "acct_1")
	r.waitLive(page, "orders-bus")
	card := `document.querySelector('article[data-id="orders-bus"]')`
	tabs := func(id string) string {
		return r.evalString(page, `[...document.querySelectorAll('article[data-id="`+id+`"] .setup-tab')].map(b =>
			b.dataset.tab + '=' + b.textContent + (b.getAttribute('aria-selected') === 'true' ? '*' : '')).join(',')`)
	}
	if got, want := tabs("orders-bus"), "policies=Policies*,cloudformation=CloudFormation,terraform=Terraform,aws-cli=AWS CLI"; got != want {
		t.Errorf("the EventBridge card's tabs read %s, want %s (* the one shown)", got, want)
	}
	if s := r.evalString(page, `[...`+card+`.querySelectorAll('.setup-panel')].map(p => p.dataset.tab + (p.hidden ? '' : '*')).join(',')`); s != "policies*,cloudformation,terraform,aws-cli" {
		t.Errorf("the card's panels (* shown): %s", s)
	}
	// Send a test follows the tabs.
	if !r.evalBool(page, `!!(`+card+`.querySelector('.setup-tabs').compareDocumentPosition(`+card+`.querySelector('.setup-next button.setup-test')) & Node.DOCUMENT_POSITION_FOLLOWING)`) {
		t.Error("the card's setup does not end with Send a test after the tabs")
	}

	// The CloudFormation tab: its Copy puts exactly the card's template on the clipboard.
	r.click(page, `article[data-id="orders-bus"] button.setup-tab[data-tab="cloudformation"]`)
	r.waitJS(page, `!`+card+`.querySelector('.setup-panel[data-tab="cloudformation"]').hidden && `+card+`.querySelector('.setup-panel[data-tab="policies"]').hidden`, "the CloudFormation panel shown alone")
	r.shotOf(page, "setup-tab-cloudformation", `article[data-id="orders-bus"] .setup`)
	if got := r.copyFromCard(page, "orders-bus", "cloudformation"); got != bus.Setup.CloudFormation {
		t.Fatalf("the CloudFormation tab copied:\n%s\nthe card's setup.cloudformation is:\n%s", got, bus.Setup.CloudFormation)
	}
	if got := r.evalString(page, card+`.querySelector('pre[data-copy="cloudformation"]').textContent`); got != bus.Setup.CloudFormation {
		t.Errorf("the CloudFormation tab shows another template than the card's:\n%s", got)
	}
	// No template URL in this relay's config: the template to download, made in the page.
	if bus.Setup.QuickCreateURL != nil {
		t.Errorf("quick_create_url is %q without identity.aws_template_url", *bus.Setup.QuickCreateURL)
	}
	if n := r.evalInt(page, card+`.querySelectorAll('a.launch-stack').length`); n != 0 {
		t.Errorf("the card offers Launch stack (%d) without a quick-create URL", n)
	}
	if s := r.evalString(page, card+`.querySelector('a.download-template').download + ' ' + `+card+`.querySelector('a.download-template').textContent`); s != "orders-bus-role.yaml Download the template" {
		t.Errorf("the download link: %q", s)
	}
	downloaded := r.evalString(page, `(async () => {
		const make = URL.createObjectURL; let blob = null;
		URL.createObjectURL = (b) => { blob = b; return make.call(URL, b); };
		const stay = (e) => e.preventDefault(); // no file written: the Blob is what is read
		document.addEventListener('click', stay, true);
		`+card+`.querySelector('a.download-template').click();
		document.removeEventListener('click', stay, true);
		URL.createObjectURL = make;
		return blob ? await blob.text() : 'no Blob made';
	})()`)
	if downloaded != bus.Setup.CloudFormation {
		t.Errorf("the downloaded template is not the card's:\n%s", downloaded)
	}

	// With a quick-create URL (identity.aws_template_url set), the tab links to it instead:
	// setup.js fed the API's card with one, in this page; a URL that is not https is no link.
	quick := "https://us-east-1.console.aws.amazon.com/cloudformation/home?region=us-east-1#/stacks/quickcreate?templateURL=https%3A%2F%2Fexample.s3.amazonaws.com%2Feventbridge.yaml&stackName=mercamap-orders-bus"
	raw, _ := json.Marshal(bus)
	launch := func(url string) string {
		return r.evalString(page, `(async () => {
			const { setupBlocks } = await import('./setup.js');
			const card = JSON.parse(`+strconv.Quote(string(raw))+`);
			card.id = 'orders-bus'; card.connector = 'eventbridge'; card.setup.quick_create_url = `+strconv.Quote(url)+`;
			const box = document.createElement('section');
			box.append(...setupBlocks(card, { setupTab: 'cloudformation' }));
			const a = box.querySelector('a.launch-stack');
			return a ? [a.href, a.target, a.rel, a.textContent, !!box.querySelector('a.download-template')].join(' ') : 'no link';
		})()`)
	}
	if got, want := launch(quick), quick+" _blank noopener noreferrer Launch stack false"; got != want {
		t.Errorf("with a quick-create URL the CloudFormation tab links %q, want %q", got, want)
	}
	if got := launch("javascript:alert(1)"); got != "no link" {
		t.Errorf("a quick-create URL that is not https became a link: %s", got)
	}

	// Terraform and the AWS CLI, copied as the card has them.
	r.click(page, `article[data-id="orders-bus"] button.setup-tab[data-tab="terraform"]`)
	if got := r.copyFromCard(page, "orders-bus", "terraform"); got != bus.Setup.Terraform {
		t.Errorf("the Terraform tab copied:\n%s\nwant the card's setup.terraform:\n%s", got, bus.Setup.Terraform)
	}
	r.click(page, `article[data-id="orders-bus"] button.setup-tab[data-tab="aws-cli"]`)
	for i, want := range bus.Setup.AWSCLI {
		if got := r.copyFromCard(page, "orders-bus", "aws-cli-"+string(rune('1'+i))); got != want {
			t.Errorf("AWS CLI command %d copied as %s, want %s", i+1, got, want)
		}
	}

	// In Spanish, the same tabs, the one chosen still shown.
	r.setLanguage(page, "es")
	if got, want := tabs("orders-bus"), "policies=Políticas,cloudformation=CloudFormation,terraform=Terraform,aws-cli=AWS CLI*"; got != want {
		t.Errorf("in Spanish the tabs read %s, want %s", got, want)
	}
	r.click(page, `article[data-id="orders-bus"] button.setup-tab[data-tab="cloudformation"]`)
	if s := r.evalString(page, card+`.querySelector('a.download-template').textContent`); s != "Descargar la plantilla" {
		t.Errorf("in Spanish the download link reads %q", s)
	}
	r.setLanguage(page, "en")

	// Pub/Sub: gcloud and Terraform.
	r.open(page, "pubsub")
	r.waitLive(page, "orders-topic")
	if got, want := tabs("orders-topic"), "gcloud=gcloud*,terraform=Terraform"; got != want {
		t.Errorf("the Pub/Sub card's tabs read %s, want %s", got, want)
	}
	if got := r.copyFromCard(page, "orders-topic", "command-1"); got != topic.Setup.Commands[0] {
		t.Errorf("the gcloud tab copied %s, want %s", got, topic.Setup.Commands[0])
	}
	r.click(page, `article[data-id="orders-topic"] button.setup-tab[data-tab="terraform"]`)
	if got := r.copyFromCard(page, "orders-topic", "terraform"); got != topic.Setup.Terraform {
		t.Errorf("the Pub/Sub Terraform tab copied:\n%s\nwant:\n%s", got, topic.Setup.Terraform)
	}

	// The role made from the card's policies, Send a test after the tabs delivers.
	r.open(page, "eventbridge")
	r.waitLive(page, "orders-bus")
	r.click(page, `article[data-id="orders-bus"] button.setup-tab[data-tab="policies"]`)
	trust := r.copyFromCard(page, "orders-bus", "trust-policy")
	if err := r.sts.SetTrustPolicy(consoleRoleARN, trust); err != nil {
		t.Fatalf("STS refuses the copied trust policy: %v\n%s", err, trust)
	}
	r.sts.SetPermissionsPolicy(consoleRoleARN, r.copyFromCard(page, "orders-bus", "permissions-policy"))
	r.click(page, `article[data-id="orders-bus"] .setup-next button.setup-test`)
	r.waitJS(page, card+`.querySelector('.test-outcome')?.dataset.outcome === 'delivered'`, "the test delivered")
	if !strings.HasPrefix(r.evalString(page, card+`.querySelector('.test-outcome').textContent`), "Test: delivered") {
		t.Errorf("the test's outcome reads %q", r.evalString(page, card+`.querySelector('.test-outcome').textContent`))
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.console) > 0 {
		t.Errorf("the pages reported errors (CSP violations, exceptions):\n%s", strings.Join(r.console, "\n"))
	}
}
