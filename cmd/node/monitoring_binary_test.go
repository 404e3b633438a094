package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// monitoringDir holds the alert rules and the Grafana dashboard shipped for operators. It
// is made absolute when the package loads: a test running the embedded S3 endpoint in
// process moves the working directory (the posix backend does), and this test runs in
// parallel with such tests.
var monitoringDir = func() string {
	dir, err := filepath.Abs("../../deploy/prometheus")
	if err != nil {
		panic(err)
	}
	return dir
}()

// pendingMetrics are names the rules and the dashboard use that no node exports yet: they
// come with work in progress elsewhere. The test passes while they are absent and fails
// once one is exported (then it belongs to the checked names: remove it here).
var pendingMetrics = map[string]string{}

// requiredAlerts are the conditions docs/operations.md promises an alert for.
var requiredAlerts = []string{"StreamtierUploadStalled", "StreamtierPersistedOffsetStuck", "StreamtierLagAgeHigh",
	"StreamtierPersistFailures", "StreamtierPersistConflicts", "StreamtierBucketUnreachable", "StreamtierOrphansGrowing"}

// TestBinaryMonitoringNamesExist parses the alert rules with Prometheus's rule parser (which
// parses every expression and template) and every dashboard expression with the PromQL
// parser, then starts the demo, scrapes its /metrics and checks that every metric the
// rules and the dashboard select exists, with the label values they match on exactly.
func TestBinaryMonitoringNamesExist(t *testing.T) {
	t.Parallel()
	p := parser.NewParser(parser.Options{})
	rulesFile := filepath.Join(monitoringDir, "streamtier-rules.yml")
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	uses := map[string][]selector{} // metric name -> where and with which matchers
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: want a severity label, a summary and a description", r.Alert)
			}
			collect(t, p, "alert "+r.Alert, r.Expr, uses)
		}
	}
	for _, a := range requiredAlerts {
		if !alerts[a] {
			t.Errorf("%s lacks the alert %s", rulesFile, a)
		}
	}

	dashFile := filepath.Join(monitoringDir, "streamtier-dashboard.json")
	b, err := os.ReadFile(dashFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashFile, err)
	}
	exprs := 0
	for _, panel := range dash.Panels {
		for _, tg := range panel.Targets {
			collect(t, p, "panel "+panel.Title, grafanaToPromQL(tg.Expr), uses)
			exprs++
		}
	}
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			collect(t, p, "variable "+v.Name, grafanaToPromQL(m[1]), uses)
		}
	}
	if exprs < 20 {
		t.Fatalf("%s: only %d panel expressions", dashFile, exprs)
	}

	dir := t.TempDir()
	// Automatic GC on, so that its metrics are there once it swept.
	n := startNode(t, dir, append(slices.Clone(demoFlags), "--gc-interval", "500ms")...)
	waitFor(t, 30*time.Second, "a first persist", func() bool { return n.status().Remote.PersistedNext > 0 })
	waitFor(t, 30*time.Second, "a first gc sweep", func() bool {
		rep, err := n.client.Status(context.Background())
		return err == nil && rep.Node.GC != nil && rep.Node.GC.Last != nil
	})
	series := scrape(t, n.client.Base+"/metrics")

	var names []string
	for name := range uses {
		names = append(names, name)
	}
	sort.Strings(names)
	var pending []string
	for _, name := range names {
		got := series[name]
		_, isPending := pendingMetrics[name]
		switch {
		case len(got) == 0 && isPending:
			pending = append(pending, name)
			continue
		case len(got) == 0:
			t.Errorf("%s (used by %s) is not in the node's /metrics", name, uses[name][0].where)
			continue
		case isPending:
			t.Errorf("%s is now exported: remove it from pendingMetrics (it is checked like the others then)", name)
		}
		for _, use := range uses[name] {
			if !slicesAny(got, use.matches) {
				t.Errorf("%s: no series of %s matches %s", use.where, name, use.text)
			}
		}
	}
	for name := range pendingMetrics {
		if _, used := uses[name]; !used {
			t.Errorf("pendingMetrics lists %s, which nothing uses", name)
		}
	}
	t.Logf("%d metric names checked against /metrics; pending (not exported yet): %v", len(names)-len(pending), pending)
}

// selector is one use of a metric: where, and the exact-value label matchers it needs.
type selector struct {
	where    string
	text     string
	matchers []*labels.Matcher
}

func (s selector) matches(series map[string]string) bool {
	for _, m := range s.matchers {
		if !m.Matches(series[m.Name]) {
			return false
		}
	}
	return true
}

// collect parses expr and records each metric it selects. Only matchers on a fixed value
// are kept (a Grafana variable became ".*").
func collect(t *testing.T, p parser.Parser, where, expr string, uses map[string][]selector) {
	t.Helper()
	e, err := p.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q: %v", where, expr, err)
		return
	}
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		sel := selector{where: where, text: vs.String()}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			switch {
			case m.Name == labels.MetricName:
				name = m.Value
			case m.Name == "job" || m.Name == "instance": // added by Prometheus, not the node
			case m.Type == labels.MatchRegexp && m.Value == ".*":
			default:
				sel.matchers = append(sel.matchers, m)
			}
		}
		if name == "" || !strings.HasPrefix(name, "streamtier_") {
			t.Errorf("%s: selector %s names no streamtier metric", where, vs)
			return nil
		}
		uses[name] = append(uses[name], sel)
		return nil
	})
}

var (
	grafanaVar  = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
	labelValues = regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)
)

// grafanaToPromQL replaces Grafana's variables: the rate interval by a duration, the
// others (matched with =~) by ".*".
func grafanaToPromQL(expr string) string {
	expr = strings.ReplaceAll(expr, "$__rate_interval", "5m")
	return grafanaVar.ReplaceAllString(expr, ".*")
}

// scrape reads the exposition text: every sample's metric name (histograms as their
// _bucket, _sum and _count series) to its series' labels.
func scrape(t *testing.T, url string) map[string][]map[string]string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	out := map[string][]map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("/metrics line %q", line)
		}
		lbls, err := p.ParseMetric(line[:i])
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[lbls.Get(labels.MetricName)] = append(out[lbls.Get(labels.MetricName)], lbls.Map())
	}
	return out
}

func slicesAny(series []map[string]string, f func(map[string]string) bool) bool {
	for _, s := range series {
		if f(s) {
			return true
		}
	}
	return false
}
