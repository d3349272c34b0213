#!/usr/bin/env python3
"""Generates infertap's Prometheus rules from one source (this file).

    scripts/gen_rules.py            writes deploy/prometheus/infertap-rules.yaml (a plain rules file)
                                    and deploy/prometheus/infertap-prometheusrule.yaml (the same groups
                                    as a kube-prometheus-stack PrometheusRule)
    scripts/gen_rules.py --check    writes nothing; exits 1 naming each file that differs from what
                                    it would write (tests/prometheus/run.sh runs this)

Needs python3 and PyYAML (Debian: python3-yaml). The rules, their names and
labels are documented in docs/fleet.md ("Recording rules") and
docs/prometheus.md ("Alerting rules across the fleet").

Naming: level:metric:operations. Levels are the labels a series keeps:
  cohort          model, route, vantage, and length_class, concurrency_band when
                  the agent's series carry them (metrics.band_labels: true)
  node_cohort     the cohort's labels and instance, node ("which node")
  cohort_cause    the cohort's labels and cause
  objective       objective (and setting, vantage where named)
  identity        model, route, response_model, system_fingerprint

No threshold is a constant here: every alert reads its numbers from the
infertap_objective{objective, setting} series the agents export from their
`objectives:` configuration. Only the `for:` durations and the burn-rate
factors are written below.
"""
import argparse
import os
import sys

try:
    import yaml
except ImportError:  # pragma: no cover
    print("gen_rules: python3-yaml is missing (apt-get install python3-yaml)", file=sys.stderr)
    sys.exit(2)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
RULES_FILE = os.path.join(ROOT, "deploy", "prometheus", "infertap-rules.yaml")
CRD_FILE = os.path.join(ROOT, "deploy", "prometheus", "infertap-prometheusrule.yaml")

# ---- labels -------------------------------------------------------------------

COHORT = ["model", "route", "vantage", "length_class", "concurrency_band"]
BASE = ["model", "route", "vantage"]  # what an objective is resolved on
NODE = ["instance", "node"]
IDENTITY = ["model", "route", "response_model", "system_fingerprint"]
# Stall and path causes that are the delivery path's, not the model's.
PATH_CAUSES = "gateway_buffering|backpressure|client_read|network"

WINDOWS = ["5m", "1h"]
BURN_WINDOWS = ["5m", "30m", "1h", "6h"]
# (alert suffix, short window, long window, burn factor, for, severity):
# the factors of the Google SRE workbook for a 30-day budget (2% and 5% of it
# spent in 1 h and 6 h).
BURNS = [("Fast", "5m", "1h", 14.4, "2m", "critical"), ("Slow", "30m", "6h", 6, "15m", "warning")]


def by(labels):
    return ", ".join(labels)


# ---- histogram families ---------------------------------------------------------


# The gen_ai_* labels TTFT is summed by before `model` is made from two of
# them: the label functions then run over the few summed series, not every
# raw one.
GEN_AI_KEEP = ["gen_ai_response_model", "gen_ai_request_model", "route", "vantage"]
MODEL_FROM_GEN_AI = '"model", "${1}${2}", "model", "unknown\\\\|(.+)|([^|]+)\\\\|.*"'


def ttft_over(func, suffix, window, keep):
    """TTFT series of both sides under one name: the server's time to first
    token (vantage server) and the client's time to first chunk (vantage
    client, acked), with infertap's `model` (the response's model, else the
    request's), summed by `keep` (with `le` for buckets)."""

    def one(metric):
        inner = f"sum by ({by(GEN_AI_KEEP + [l for l in keep if l not in COHORT])}) ({func}({metric}_{suffix}[{window}]))"
        joined = f'label_join({inner}, "model", "|", "gen_ai_response_model", "gen_ai_request_model")'
        return f"label_replace({joined}, {MODEL_FROM_GEN_AI})"

    return f"""sum by ({by(keep)}) (
  {one('gen_ai_server_time_to_first_token_seconds')}
  or
  {one('gen_ai_client_operation_time_to_first_chunk_seconds')}
)"""


def ttft_source(window, extra=()):
    return ttft_over("rate", "bucket", window, COHORT + list(extra) + ["le"])


def ttft_count(window, extra=()):
    return ttft_over("increase", "count", window, COHORT + list(extra))


# name recorded -> (source metric or None for TTFT, quantiles, node quantiles)
HISTOGRAMS = [
    ("infertap_ttft_seconds", None, ["0.5", "0.95", "0.99"], ["0.5", "0.95"]),
    ("infertap_tokens_per_second", "infertap_tokens_per_second", ["0.1", "0.5"], ["0.1", "0.5"]),
    ("infertap_inter_token_latency_seconds", "infertap_inter_token_latency_seconds", ["0.5", "0.95", "0.99"], ["0.99"]),
    ("infertap_longest_pause_seconds", "infertap_longest_pause_seconds", ["0.5", "0.95"], ["0.95"]),
    ("infertap_delivery_lag_seconds", "infertap_delivery_lag_seconds", ["0.5", "0.95", "0.99"], ["0.95"]),
]


def qname(q):
    """0.5 -> p50, 0.95 -> p95, 0.1 -> p10."""
    return "p" + f"{float(q) * 100:g}".replace(".", "_").zfill(2)


def record(name, expr, labels=None):
    r = {"record": name, "expr": expr}
    if labels:
        r["labels"] = labels
    return r


def cohort_rules():
    rules = []
    for w in WINDOWS:
        for name, source, quantiles, _ in HISTOGRAMS:
            bucket = f"cohort:{name}_bucket:rate{w}"
            if source is None:
                rules.append(record(bucket, ttft_source(w)))
                rules.append(record(f"cohort:{name}_count:increase{w}", ttft_count(w)))
            else:
                rules.append(record(bucket, f"sum by ({by(COHORT + ['le'])}) (rate({source}_bucket[{w}]))"))
                rules.append(record(f"cohort:{name}_count:increase{w}",
                                    f"sum by ({by(COHORT)}) (increase({source}_count[{w}]))"))
            for q in quantiles:
                rules.append(record(f"cohort:{name}:{qname(q)}_{w}", f"histogram_quantile({q}, {bucket})"))
        rules.append(record(f"cohort:infertap_streams:increase{w}",
                            f"sum by ({by(BASE)}) (increase(infertap_streams_total[{w}]))"))
        rules.append(record(f"cohort_cause:infertap_stalls:rate{w}",
                            f"sum by ({by(BASE + ['cause'])}) (rate(infertap_stalls_total[{w}]))"))
        # One stream the path degraded counts once per cause found on it, so
        # each cause's share is exact and the causes do not add up to a share.
        rules.append(record(f"cohort_cause:infertap_path_degraded_streams:ratio_rate{w}", f"""clamp_max(
  sum by ({by(BASE + ['cause'])}) (rate(infertap_path_degraded_streams_total[{w}]))
  / on({by(BASE)}) group_left()
  sum by ({by(BASE)}) (rate(infertap_delivery_lag_seconds_count[{w}])),
  1
)"""))
    return rules


def node_source(name, source, window):
    if source is not None:
        return f"sum by ({by(COHORT + NODE + ['le'])}) (rate({source}_bucket[{window}]))"
    return ttft_source(window, NODE)


def node_rules():
    rules = []
    for w in WINDOWS:
        for name, source, _, quantiles in HISTOGRAMS:
            for q in quantiles:
                rules.append(record(f"node_cohort:{name}:{qname(q)}_{w}",
                                    f"histogram_quantile({q}, {node_source(name, source, w)})"))
        rules.append(record(f"node_cohort:infertap_tokens_per_second_count:increase{w}",
                            f"sum by ({by(COHORT + NODE)}) (increase(infertap_tokens_per_second_count[{w}]))"))
        rules.append(record(f"node_cohort:infertap_ttft_seconds_count:increase{w}", ttft_count(w, NODE)))
        rules.append(record(f"node_cohort:infertap_streams:increase{w}",
                            f"sum by ({by(BASE + NODE)}) (increase(infertap_streams_total[{w}]))"))
        rules.append(record(f"node_cohort_cause:infertap_stalls:rate{w}",
                            f"sum by ({by(BASE + NODE + ['cause'])}) (rate(infertap_stalls_total[{w}]))"))
    return rules


# ---- objectives -----------------------------------------------------------------

# The settings the alerts read per cohort (infertap_objective{setting=...}).
COHORT_SETTINGS = ["ttft_seconds", "min_tokens_per_second", "objective_ratio", "baseline_ratio",
                   "ttft_floor_seconds", "rate_floor_tokens_per_second", "min_streams",
                   "delivery_lag_seconds", "lag_floor_seconds", "max_path_degraded_share"]


def objective_rules():
    rules = [
        # One value per objective and setting whatever the number of agents.
        record("objective:infertap_objective:max", "max by (objective, setting) (infertap_objective)"),
        # The objective a cohort is judged against: the first one (in the
        # configuration's order) whose globs match its model and route.
        record("cohort:infertap_objective:primary", f"""bottomk by ({by(BASE)}) (1,
  group by (objective, {by(BASE)}) (infertap_objective_streams_total)
  * on(objective) group_left()
  objective:infertap_objective:max{{setting="order"}}
)"""),
    ]
    for s in COHORT_SETTINGS:
        rules.append(record("cohort:infertap_objective:setting", f"""0 * cohort:infertap_objective:primary
+ on(objective) group_left()
objective:infertap_objective:max{{setting="{s}"}}""", {"setting": s}))
    for w in BURN_WINDOWS:
        rules.append(record(f"objective:infertap_objective_streams:increase{w}",
                            f"sum by (objective, vantage) (increase(infertap_objective_streams_total[{w}]))"))
        rules.append(record(f"objective:infertap_objective_streams_unmet:ratio_rate{w}", f"""sum by (objective, vantage) (rate(infertap_objective_streams_total{{met="false"}}[{w}]))
/
sum by (objective, vantage) (rate(infertap_objective_streams_total[{w}]))"""))
    for w in WINDOWS:
        rules.append(record(f"cohort_objective:infertap_objective_streams_unmet:ratio_rate{w}", f"""sum by (objective, {by(BASE)}) (rate(infertap_objective_streams_total{{met="false"}}[{w}]))
/
sum by (objective, {by(BASE)}) (rate(infertap_objective_streams_total[{w}]))"""))
    return rules


def identity_rules():
    return [
        record("identity:infertap_serving_identity:max", f"max by ({by(IDENTITY)}) (infertap_serving_identity)"),
        # New: serving now, and not yet serving by the start of the hour the
        # day-before baselines (…_1h offset 1d) are taken from, so a cohort's
        # baseline is compared only once it is the new identity's own. (Seen
        # at any time in the hour before that start: an identity of sparse
        # traffic, absent at one instant, is not new.)
        record("identity:infertap_serving_identity:new", f"""identity:infertap_serving_identity:max
unless on({by(IDENTITY)})
max_over_time(identity:infertap_serving_identity:max[1h] offset 25h)"""),
    ]


def daily_rules():
    rules = []
    for name in ["infertap_tokens_per_second", "infertap_ttft_seconds"]:
        # The day's buckets: the mean of 24 hourly rates (a subquery on the
        # recorded cohort rates, cheap however long the day's raw series).
        rules.append(record(f"cohort:{name}:p50_1d",
                            f"histogram_quantile(0.5, avg_over_time(cohort:{name}_bucket:rate1h[1d:1h]))"))
        rules.append(record(f"cohort:{name}:p50_1d_dod",
                            f"cohort:{name}:p50_1d / cohort:{name}:p50_1d offset 1d"))
        rules.append(record(f"cohort:{name}:p50_1d_wow",
                            f"cohort:{name}:p50_1d / cohort:{name}:p50_1d offset 7d"))
    return rules


# ---- alerts ---------------------------------------------------------------------


def setting(name, vantage=None):
    selector = f', vantage="{vantage}"' if vantage else ""
    return f'cohort:infertap_objective:setting{{setting="{name}"{selector}}}'


ON_BASE = f"on({by(BASE)}) group_left()"
# The delivery path is judged with the objective of the server side of the
# model and route: the delivery views are the server records' own.
ON_SERVER = "on(model, route) group_left()"


def worse_than(ref, ratio, floor, higher_is_worse, on=ON_BASE, vantage=None):
    """The materiality threshold of a reference: worse by the ratio AND by the
    floor, i.e. max(ref * ratio, ref + floor) (min(ref / ratio, ref - floor) when
    lower is worse). `ref` keeps its labels; ratio and floor are per cohort."""
    r, f = setting(ratio, vantage), setting(floor, vantage)
    if higher_is_worse:
        a, b = f"({ref}) * {on} {r}", f"({ref}) + {on} {f}"
        return f"(({a}) >= ({b})) or ({b})"
    a, b = f"({ref}) / {on} {r}", f"({ref}) - {on} {f}"
    return f"(({a}) <= ({b})) or ({b})"


def indent(text, n=2):
    return "\n".join(" " * n + line if line else line for line in text.splitlines())


def hysteresis(alert, enter, stay, on_labels):
    """Enter on a material breach; once firing, stay while not back at the
    reference itself: the band between the two is what keeps a cohort hovering
    around the enter threshold from flapping."""
    return f"""(
{indent(enter)}
)
or
(
{indent(stay)}
  and on({by(on_labels)})
  ALERTS{{alertname="{alert}", alertstate="firing"}}
)"""


def enough(count):
    return f"({count} >= {ON_BASE} {setting('min_streams')})"


def with_objective(expr, on=BASE, primary="cohort:infertap_objective:primary"):
    """The cohort's objective as a label (the value unchanged)."""
    return f"""(
{indent(expr)}
)
* on({by(on)}) group_left(objective) (0 * {primary} + 1)"""


def breach_alert(alert, value, labels, ref, ref_labels, ratio, floor, higher_is_worse, count, extra_enter=""):
    """`value` (with `labels`) materially worse than `ref` (matched on
    `ref_labels`) in a window with enough streams; firing until back at `ref`."""
    cmp = ">" if higher_is_worse else "<"
    on_ref = f"on({by(ref_labels)}) group_left()"
    enter = with_objective(f"""{value}
{cmp} {on_ref}
({worse_than(ref, ratio, floor, higher_is_worse)})
and on({by(labels)}) {enough(count)}{extra_enter}""")
    stay = with_objective(f"{value} {cmp} {on_ref} ({ref})")
    return hysteresis(alert, enter, stay, labels + ["objective"])


def alert(name, expr, for_, severity, summary, description):
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "description": description},
    }


def alert_rules():
    rules = []
    ttft, ttft_n = "cohort:infertap_ttft_seconds:p50_5m", "cohort:infertap_ttft_seconds_count:increase5m"
    rate, rate_n = "cohort:infertap_tokens_per_second:p50_5m", "cohort:infertap_tokens_per_second_count:increase5m"

    def baseline_alert(name, value, count, floor, higher_is_worse):
        """Against the cohort's own median of the same hour a day before, with
        enough streams then too, and not while a new serving identity has no
        day of its own history."""
        metric = value.split(":")[1]
        enter_also = f"\nand on({by(COHORT)}) {enough(count.replace('increase5m', 'increase1h offset 1d'))}"
        expr = breach_alert(name, value, COHORT, f"cohort:{metric}:p50_1h offset 1d", COHORT, "baseline_ratio", floor,
                            higher_is_worse, count, enter_also)
        return f"(\n{indent(expr)}\n)\nunless on(model, route) identity:infertap_serving_identity:new"

    rules.append(alert(
        "InfertapTTFTAboveObjective",
        breach_alert("InfertapTTFTAboveObjective", ttft, COHORT, setting("ttft_seconds"), BASE, "objective_ratio",
                     "ttft_floor_seconds", True, ttft_n),
        "10m", "warning",
        "TTFT of {{ $labels.model }} {{ $labels.route }} ({{ $labels.vantage }}) materially above objective {{ $labels.objective }}",
        "The median time to first token over 5 m (cohort:infertap_ttft_seconds:p50_5m) is above the objective's "
        "ttft_seconds by its objective_ratio and ttft_floor_seconds, for 10 m. It recovers once back at ttft_seconds."))
    rules.append(alert(
        "InfertapTTFTAboveBaseline", baseline_alert("InfertapTTFTAboveBaseline", ttft, ttft_n, "ttft_floor_seconds", True),
        "15m", "warning",
        "TTFT of {{ $labels.model }} {{ $labels.route }} ({{ $labels.vantage }}) materially above yesterday's",
        "The median time to first token over 5 m (cohort:infertap_ttft_seconds:p50_5m) is above the cohort's own "
        "median of the same hour a day before by baseline_ratio and ttft_floor_seconds, for 15 m. It recovers once "
        "back at that median."))
    rules.append(alert(
        "InfertapDecodeBelowObjective",
        breach_alert("InfertapDecodeBelowObjective", rate, COHORT, setting("min_tokens_per_second"), BASE,
                     "objective_ratio", "rate_floor_tokens_per_second", False, rate_n),
        "10m", "warning",
        "Decode rate of {{ $labels.model }} {{ $labels.route }} ({{ $labels.vantage }}) materially below objective {{ $labels.objective }}",
        "The median post-first-token rate over 5 m (cohort:infertap_tokens_per_second:p50_5m) is below the objective's "
        "min_tokens_per_second by its objective_ratio and rate_floor_tokens_per_second, for 10 m. It recovers once "
        "back at min_tokens_per_second."))
    rules.append(alert(
        "InfertapDecodeBelowBaseline",
        baseline_alert("InfertapDecodeBelowBaseline", rate, rate_n, "rate_floor_tokens_per_second", False),
        "15m", "warning",
        "Decode rate of {{ $labels.model }} {{ $labels.route }} ({{ $labels.vantage }}) materially below yesterday's",
        "The median post-first-token rate over 5 m (cohort:infertap_tokens_per_second:p50_5m) is below the cohort's "
        "own median of the same hour a day before by baseline_ratio and rate_floor_tokens_per_second, for 15 m. It "
        "recovers once back at that median. A new serving identity is compared with its own history only, a day "
        "after it appeared."))

    # Per node against the same cohort across the fleet.
    for name, value, ref, floor, hiw, count, what in [
        ("InfertapNodeTTFTAboveFleet", "node_cohort:infertap_ttft_seconds:p50_5m", ttft, "ttft_floor_seconds", True,
         "node_cohort:infertap_ttft_seconds_count:increase5m", "time to first token"),
        ("InfertapNodeDecodeBelowFleet", "node_cohort:infertap_tokens_per_second:p50_5m", rate,
         "rate_floor_tokens_per_second", False, "node_cohort:infertap_tokens_per_second_count:increase5m",
         "post-first-token rate"),
    ]:
        rules.append(alert(
            name, breach_alert(name, value, COHORT + NODE, ref, COHORT, "baseline_ratio", floor, hiw, count),
            "15m", "warning",
            f"{{{{ $labels.instance }}}}: {what} of {{{{ $labels.model }}}} {{{{ $labels.route }}}} materially worse than the fleet's",
            f"The node's median {what} over 5 m is materially worse (baseline_ratio and floor) than the same "
            "cohort's across the fleet, for 15 m."))

    # The delivery path: clients fall behind (or the path degrades streams)
    # while the server side of the same model and route meets its objective.
    lag = f"max by ({by(BASE)}) (cohort:infertap_delivery_lag_seconds:p95_5m)"
    share = f'max by ({by(BASE)}) (cohort_cause:infertap_path_degraded_streams:ratio_rate5m{{cause=~"{PATH_CAUSES}"}})'
    n = f"sum by ({by(BASE)}) (cohort:infertap_delivery_lag_seconds_count:increase5m)"
    server_setting = lambda name: setting(name, "server")  # noqa: E731
    lag_threshold = worse_than(server_setting("delivery_lag_seconds"), "objective_ratio", "lag_floor_seconds", True,
                               on="on(model, route, vantage) group_left()", vantage="server")
    share_threshold = f"{server_setting('max_path_degraded_share')} * ignoring(setting) {server_setting('objective_ratio')}"
    min_streams = f"({n} >= {ON_SERVER} {server_setting('min_streams')})"
    on_server = ["model", "route"]
    server_primary = 'cohort:infertap_objective:primary{vantage="server"}'
    enter = with_objective(f"""(
  {lag} > {ON_SERVER} ({lag_threshold})
  or
  {share} > {ON_SERVER} ({share_threshold})
)
and on({by(BASE)}) {min_streams}""", on_server, server_primary)
    stay = with_objective(f"""{lag} > {ON_SERVER} {server_setting('delivery_lag_seconds')}
or
{share} > {ON_SERVER} {server_setting('max_path_degraded_share')}""", on_server, server_primary)
    server_unhealthy = f"""(
  {rate}{{vantage="server"}} < {ON_BASE} {setting('min_tokens_per_second')}
  or
  {ttft}{{vantage="server"}} > {ON_BASE} {setting('ttft_seconds')}
)"""
    rules.append(alert(
        "InfertapDeliveryPathDegraded",
        f"""(
{indent(hysteresis("InfertapDeliveryPathDegraded", enter, stay, BASE + ["objective"]))}
)
unless on(model, route)
{server_unhealthy}""",
        "10m", "warning",
        "Clients of {{ $labels.model }} {{ $labels.route }} ({{ $labels.vantage }}) fall behind a healthy server",
        "The delivery lag at the last token (p95 over 5 m) or the share of streams the path degraded "
        f"({PATH_CAUSES.replace('|', ', ')}) is materially above the objective while the server meets its "
        "objective: look at gateways, the network and the clients' reads (cohort_cause:infertap_path_degraded_streams:"
        "ratio_rate5m names the causes)."))

    # Multi-window burn rates of "share of streams with TTFT <= X and rate >= Y".
    target = 'objective:infertap_objective:max{setting="target"}'
    min_n = 'objective:infertap_objective:max{setting="min_streams"}'
    for suffix, short, long_, factor, for_, severity in BURNS:
        conds = []
        for w in (short, long_):
            conds.append(f"objective:infertap_objective_streams_unmet:ratio_rate{w} > on(objective) group_left() "
                         f"({factor} * (1 - {target}))")
            conds.append(f"objective:infertap_objective_streams:increase{w} >= on(objective) group_left() {min_n}")
        expr = conds[0] + "\n" + "\n".join(f"and on(objective, vantage) {c}" for c in conds[1:])
        rules.append(alert(
            f"InfertapObjectiveBurn{suffix}", expr, for_, severity,
            f"Objective {{{{ $labels.objective }}}} ({{{{ $labels.vantage }}}}) burns its error budget {factor}x too fast",
            "The share of streams missing the objective (TTFT above ttft_seconds, rate below min_tokens_per_second, "
            f"or an error) is over {factor} times 1 - target over {short} and over {long_}."))

    rules.append(alert(
        "InfertapServingIdentityNew", "identity:infertap_serving_identity:new", "5m", "info",
        "Review the baseline: {{ $labels.model }} {{ $labels.route }} is served by a new identity",
        "response model {{ $labels.response_model }}, system_fingerprint {{ $labels.system_fingerprint }} was not "
        "serving a day ago. Day-before baselines of this cohort are not compared until the new identity has a day "
        "of its own history; check whether the change was intended."))
    return rules


def groups():
    return [
        {"name": "infertap.cohort", "rules": cohort_rules()},
        {"name": "infertap.node", "rules": node_rules()},
        {"name": "infertap.objective", "rules": objective_rules()},
        {"name": "infertap.identity", "rules": identity_rules()},
        {"name": "infertap.daily", "rules": daily_rules()},
        {"name": "infertap.alerts", "rules": alert_rules()},
    ]


# ---- output ---------------------------------------------------------------------


class Dumper(yaml.SafeDumper):
    pass


def _str(dumper, s):
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


Dumper.add_representer(str, _str)

HEADER = """# Generated by scripts/gen_rules.py from its own source; do not edit.
# Regenerate: scripts/gen_rules.py   (tests/prometheus/run.sh checks it is current)
# Recorded names and labels: docs/fleet.md; alerts: docs/prometheus.md.
"""


def dump(doc):
    return HEADER + yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=120, default_flow_style=False)


def outputs():
    rules = {"groups": groups()}
    crd = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "infertap",
            "namespace": "infertap",
            # kube-prometheus-stack selects rules by its release label.
            "labels": {"app.kubernetes.io/name": "infertap", "release": "kube-prometheus-stack"},
        },
        "spec": rules,
    }
    return {RULES_FILE: dump(rules), CRD_FILE: dump(crd)}


def write_or_check(files, check, regenerate):
    """Writes each path's text; with `check`, writes nothing and returns 1
    naming the files whose text differs (`regenerate`: the command that
    rewrites them)."""
    stale = []
    for path, text in files.items():
        if check:
            try:
                with open(path, encoding="utf-8") as f:
                    current = f.read()
            except FileNotFoundError:
                current = None
            if current != text:
                stale.append(os.path.relpath(path, ROOT))
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if stale:
        print(f"out of date (run {regenerate}): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    return write_or_check(outputs(), ap.parse_args().check, "scripts/gen_rules.py")


if __name__ == "__main__":
    sys.exit(main())
