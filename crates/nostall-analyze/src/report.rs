//! A finished analysis and its three renderings: a terminal summary, JSON (the
//! [`Report`] itself, serialised), and one self-contained HTML page with charts that
//! opens offline.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::chart::{escape, stacked_bars, Bar, LineChart, Series};
use super::measure::{CacheRate, FetchRate, PrepRate};
use super::observe::{Observation, Steady};
use super::whatif::{Advice, Point, RemotePrep, WhatIf};
use nostall::error::{Error, Result};
use nostall::sched::model::{Bottleneck, Prediction, Rates};

/// The configuration analysed, as a reader would describe it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Configuration {
    /// The pipeline, as [`nostall::Pipeline`] prints it.
    pub pipeline: String,
    /// Samples per batch.
    pub batch_size: usize,
    /// Prep threads.
    pub prep_threads: usize,
    /// Fetch threads (requests in flight).
    pub fetch_threads: usize,
    /// The cache policy ("none", "minio", "lru").
    pub cache: String,
    /// The share of the dataset the cache holds, 0–1.
    pub cache_share: f64,
    /// Where the bytes come from (e.g. "local files, read cold").
    pub storage: String,
}

/// G, and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRate {
    /// Samples per second; `None` when the model is left out (infinitely fast).
    pub rate: Option<f64>,
    /// How it was obtained, in words.
    pub how: String,
}

impl ModelRate {
    /// A rate the user gave, in samples/s.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] unless it is finite and above 0.
    pub fn given(rate: f64) -> Result<ModelRate> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(Error::Config(format!(
                "model rate {rate}: give the model's samples/s (above 0), or leave the model \
                 out to analyse the input pipeline alone"
            )));
        }
        Ok(ModelRate {
            rate: Some(rate),
            how: format!("given: {rate:.0} samples/s"),
        })
    }

    /// A simulated model spending `step_ms` milliseconds on every batch of `batch_size`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] unless `step_ms` is finite and above 0.
    pub fn simulated(step_ms: f64, batch_size: usize) -> Result<ModelRate> {
        let step_ms = super::positive("step_ms", step_ms, false)?;
        let rate = batch_size as f64 / (step_ms / 1e3);
        Ok(ModelRate {
            rate: Some(rate),
            how: format!("simulated: {step_ms} ms per batch of {batch_size}, {rate:.0} samples/s"),
        })
    }

    /// No model: the input pipeline alone.
    pub fn none() -> ModelRate {
        ModelRate {
            rate: None,
            how: "none: the input pipeline alone".into(),
        }
    }

    /// A rate measured by timing the user's training step; `what` says what was timed
    /// (e.g. "your training step on synthetic batches of 64 × 3×224×224 float32, median
    /// of 10 steps").
    pub fn timed(rate: f64, what: &str) -> ModelRate {
        ModelRate {
            rate: Some(rate),
            how: format!("timed: {what}, {rate:.0} samples/s"),
        }
    }
}

/// The measurements an analysis took (absent when it reused earlier rates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    /// F.
    pub fetch: FetchRate,
    /// P(n) for n = 1, 2, ….
    pub prep: Vec<PrepRate>,
    /// C.
    pub cache: CacheRate,
    /// Seconds all measurements took.
    pub seconds: f64,
}

/// Everything an analysis found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// nostall's version.
    pub version: String,
    /// The dataset's location.
    pub dataset: String,
    /// The configuration analysed.
    pub configuration: Configuration,
    /// G.
    pub model: ModelRate,
    /// The rates the model used.
    pub rates: Rates,
    /// How they were measured.
    pub measurements: Option<Measurements>,
    /// The prediction for the configuration.
    pub prediction: Prediction,
    /// The real run, epoch by epoch.
    pub observation: Option<Observation>,
    /// The real run's steady state, to hold beside the prediction.
    pub observed: Option<Steady>,
    /// The sweeps.
    pub what_if: WhatIf,
    /// The advice.
    pub advice: Advice,
}

const COMPUTE: &str = "#2a9d8f";
const PREP: &str = "#e9c46a";
const FETCH: &str = "#e76f51";
const STALL: &str = "#b5838d";
const THROUGHPUT: &str = "#264653";
const MODEL: &str = "#6c757d";

fn bottleneck_words(b: Bottleneck) -> &'static str {
    match b {
        Bottleneck::Fetch => "fetch (reading samples)",
        Bottleneck::Prep => "prep (decoding and augmenting)",
        Bottleneck::Model => "the model (no data stall)",
        _ => "a stage this report does not know",
    }
}

fn pct(share: f64) -> String {
    format!("{:.1}%", 100.0 * share)
}

fn spread_words(relative: f64, runs: usize) -> String {
    if runs > 1 {
        format!("±{:.1}% over {runs} runs", 50.0 * relative)
    } else {
        "one run".into()
    }
}

impl Report {
    /// The report as pretty-printed JSON: what `nostall analyze --json` writes.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serialises")
    }

    /// The rates of a report's JSON (what [`Report::json`] wrote), to analyse again
    /// without measuring ([`super::Options::rates`]). Only `rates` is read, so a report
    /// of another version of nostall serves as long as its rates have the same shape.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `text` is not such a report.
    pub fn rates_from_json(text: &str) -> Result<Rates> {
        /// The part of a report this needs.
        #[derive(Deserialize)]
        struct Saved {
            rates: Rates,
        }
        serde_json::from_str::<Saved>(text)
            .map(|saved| saved.rates)
            .map_err(|e| {
                Error::Config(format!(
                    "not a report written by `nostall analyze` (its JSON): {e}"
                ))
            })
    }

    /// The summary printed in a terminal.
    pub fn text(&self) -> String {
        let mut t = String::new();
        let r = &self.rates;
        let c = &self.configuration;
        let _ = writeln!(
            t,
            "nostall analyze: {} ({} samples, {:.1} MB)",
            self.dataset,
            r.samples,
            r.dataset_bytes as f64 / 1e6
        );
        let _ = writeln!(
            t,
            "configuration: {}, batch {}, {} prep threads, {} fetch threads, cache {} ({}), {}",
            c.pipeline,
            c.batch_size,
            c.prep_threads,
            c.fetch_threads,
            c.cache,
            pct(c.cache_share),
            c.storage
        );
        let _ = writeln!(t, "model: {}\n", self.model.how);
        let _ = writeln!(t, "{:<44}{:>12}  spread", "rate", "samples/s");
        for row in self.rate_rows() {
            let _ = writeln!(t, "{:<44}{:>12}  {}", row.0, row.1, row.2);
        }
        let p = &self.prediction;
        let _ = writeln!(
            t,
            "\npredicted: {:.0} samples/s, limited by {}; of epoch time: compute {}, prep stall {}, fetch stall {}",
            p.throughput,
            bottleneck_words(p.bottleneck),
            pct(p.compute_share),
            pct(p.prep_stall_share),
            pct(p.fetch_stall_share)
        );
        if let Some(o) = &self.observed {
            let _ = writeln!(
                t,
                "measured:  {:.0} samples/s ({:+.1}% from predicted); of epoch time: compute {}, data stall {}; cache hits {}{}",
                o.images_per_s,
                100.0 * (o.images_per_s / p.throughput - 1.0),
                pct(o.compute_share),
                pct(o.stall_share),
                pct(o.cache_hit_share),
                if o.steady { "" } else { " (first epoch only: the cache was still filling)" }
            );
        }
        if let Some(choices) = self.observation.as_ref().and_then(Observation::choices) {
            let _ = writeln!(t, "loader chose: {choices}");
        }
        if let Some(run) = &self.observation {
            for (what, list) in [("samples", &run.slowest), ("shards", &run.slowest_shards)] {
                if list.is_empty() {
                    continue;
                }
                let _ = writeln!(t, "\ncostliest {what} of the last epoch run (fetch, prep):");
                for c in list.iter().take(5) {
                    let _ = writeln!(
                        t,
                        "  {:>8.1} ms {:>8.1} ms  {}{}",
                        c.fetch_ms,
                        c.prep_ms,
                        c.location,
                        if c.samples == 1 {
                            String::new()
                        } else {
                            format!(" ({} samples)", c.samples)
                        }
                    );
                }
            }
        }
        let _ = writeln!(t, "\n{}", wrap(&self.advice.verdict, 88));
        t
    }

    /// The rows of the rates table: name, samples/s, spread.
    fn rate_rows(&self) -> Vec<(String, String, String)> {
        let r = &self.rates;
        let mut rows = Vec::new();
        if let Some(g) = r.model {
            rows.push(("G  model".into(), format!("{g:.0}"), String::new()));
        }
        match &self.measurements {
            Some(m) => {
                for p in &m.prep {
                    rows.push((
                        format!("P  prep, {} thread(s), data in memory", p.threads),
                        format!("{:.0}", p.samples_per_s),
                        spread_words(p.spread.relative(p.samples_per_s), p.spread.runs),
                    ));
                }
                let f = &m.fetch;
                rows.push((
                    format!(
                        "F  fetch, {} in flight ({:.1} MB/s)",
                        f.concurrency,
                        f.bytes_per_s / 1e6
                    ),
                    format!("{:.0}", f.samples_per_s),
                    spread_words(f.spread.relative(f.bytes_per_s), f.spread.runs),
                ));
                rows.push((
                    "C  cache hits".into(),
                    format!("{:.0}", m.cache.samples_per_s),
                    String::new(),
                ));
            }
            None => {
                for (n, p) in r.prep.iter().enumerate() {
                    rows.push((
                        format!("P  prep, {} thread(s) (from earlier report)", n + 1),
                        format!("{p:.0}"),
                        String::new(),
                    ));
                }
                rows.push((
                    format!(
                        "F  storage, {:.1} MB/s (from earlier report)",
                        r.storage_bytes_per_s / 1e6
                    ),
                    format!("{:.0}", r.storage()),
                    String::new(),
                ));
                rows.push((
                    "C  cache hits".into(),
                    format!("{:.0}", r.cache),
                    String::new(),
                ));
            }
        }
        rows
    }

    /// The report as one HTML page: no external file, font or network access.
    pub fn html(&self) -> String {
        let mut h = String::new();
        let c = &self.configuration;
        let p = &self.prediction;
        let _ = write!(
            h,
            r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>nostall analyze: {dataset}</title>
<script>window.addEventListener("error", function (e) {{ var d = document.documentElement.dataset; d.scriptErrors = (d.scriptErrors || "") + e.message + "; "; }});</script>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 860px; margin: 2em auto; padding: 0 1em; color: #222; }}
h1 {{ font-size: 1.5em; }} h2 {{ font-size: 1.15em; margin-top: 2em; }}
.verdict {{ background: #f4f7f6; border-left: 4px solid {THROUGHPUT}; padding: 0.8em 1em; line-height: 1.5; }}
table {{ border-collapse: collapse; margin: 0.6em 0; }} td, th {{ padding: 0.25em 0.8em; border-bottom: 1px solid #ddd; text-align: left; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
figure {{ margin: 1.2em 0; }} figcaption {{ font-weight: 600; margin-bottom: 0.3em; }}
svg .tick {{ font-size: 11px; fill: #444; }} svg .label {{ font-size: 12px; fill: #222; }}
.note {{ color: #555; font-size: 0.9em; }}
</style></head><body>
<h1>Where does training wait for data?</h1>
<p class="note">Dataset <code>{dataset}</code>: {samples} samples, {mb:.1} MB. Configuration: {pipeline}, batch {batch}, {threads} prep threads, {fetch} fetch threads, cache {cache} ({share}), {storage}. Model: {model}.</p>
<h2>Verdict</h2>
<p class="verdict">{verdict}</p>
"#,
            dataset = escape(&self.dataset),
            samples = self.rates.samples,
            mb = self.rates.dataset_bytes as f64 / 1e6,
            pipeline = escape(&c.pipeline),
            batch = c.batch_size,
            threads = c.prep_threads,
            fetch = c.fetch_threads,
            cache = escape(&c.cache),
            share = pct(c.cache_share),
            storage = escape(&c.storage),
            model = escape(&self.model.how),
            verdict = escape(&self.advice.verdict),
        );
        h.push_str("<h2>Where epoch time goes</h2>\n");
        let mut bars = vec![Bar {
            label: "predicted",
            segments: vec![
                (p.compute_share, "compute", COMPUTE),
                (p.prep_stall_share, "prep stall", PREP),
                (p.fetch_stall_share, "fetch stall", FETCH),
            ],
        }];
        if let Some(o) = &self.observed {
            bars.push(Bar {
                label: "measured",
                segments: vec![
                    (o.compute_share, "compute", COMPUTE),
                    (o.stall_share, "data stall (measured)", STALL),
                ],
            });
        }
        figure(
            &mut h,
            "Stall breakdown: share of epoch time spent computing and waiting for data",
            &stacked_bars(
                &bars,
                "Share of epoch time: compute, prep stall, fetch stall",
            ),
        );
        h.push_str("<table><tr><th></th><th>samples/s</th><th>limited by</th><th>compute</th><th>prep stall</th><th>fetch stall</th></tr>");
        let _ = write!(
            h,
            r#"<tr><td>predicted</td><td class="n">{:.0}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
            p.throughput,
            bottleneck_words(p.bottleneck),
            pct(p.compute_share),
            pct(p.prep_stall_share),
            pct(p.fetch_stall_share)
        );
        if let Some(o) = &self.observed {
            let _ = write!(
                h,
                r#"<tr><td>measured</td><td class="n">{:.0}</td><td>{}</td><td class="n">{}</td><td class="n" colspan="2">{} (data stall, both causes)</td></tr>"#,
                o.images_per_s,
                match (&self.observation, o.steady) {
                    (Some(run), true) if run.warm_up > 0 => {
                        "real run, after the cache's first epoch"
                    }
                    (_, true) => "real run",
                    (_, false) => "real run, first epoch only: the cache was still filling",
                },
                pct(o.compute_share),
                pct(o.stall_share)
            );
        }
        h.push_str("</table>\n");
        if let Some(choices) = self.observation.as_ref().and_then(Observation::choices) {
            let _ = writeln!(h, "<p>Loader chose: {}</p>", escape(&choices));
        }
        if let Some(run) = &self.observation {
            for (what, list) in [("samples", &run.slowest), ("shards", &run.slowest_shards)] {
                if list.is_empty() {
                    continue;
                }
                let _ = write!(
                    h,
                    "<h2>Costliest {what} of the last epoch run</h2>\n<table><tr><th>location</th><th>samples</th><th>fetch ms</th><th>prep ms</th></tr>"
                );
                for c in list {
                    let _ = write!(
                        h,
                        r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{:.1}</td><td class="n">{:.1}</td></tr>"#,
                        escape(&c.location),
                        c.samples,
                        c.fetch_ms,
                        c.prep_ms
                    );
                }
                h.push_str("</table>\n<p class=\"note\">A slow fetch points to a file to move nearer (or cache); a slow prep to one to re-encode smaller.</p>\n");
            }
        }
        h.push_str("<h2>Measured rates</h2>\n<table><tr><th>rate</th><th>samples/s</th><th>spread</th></tr>");
        for (name, rate, spread) in self.rate_rows() {
            let _ = write!(
                h,
                r#"<tr><td>{}</td><td class="n">{rate}</td><td>{}</td></tr>"#,
                escape(&name),
                escape(&spread)
            );
        }
        h.push_str("</table>\n<p class=\"note\">G is how fast the model consumes samples; P(n) how fast n threads decode and augment with the data already in memory; F how fast samples are read from storage, cold; C how fast the in-memory cache serves them. Throughput is the slowest of the three.</p>\n<h2>What if</h2>\n");
        self.what_if_charts(&mut h);
        if let Some(remote) = &self.advice.remote {
            remote_table(&mut h, remote);
        }
        let json = serde_json::to_string(self)
            .expect("a report serialises")
            .replace("</", "<\\/");
        let _ = write!(
            h,
            r##"<p class="note">nostall {version}. <a id="download" href="#" download="nostall-analysis.json">Download the figures as JSON</a>.</p>
<script type="application/json" id="report-data">{json}</script>
<script>
(function () {{
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var link = document.getElementById("download");
  link.href = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], {{ type: "application/json" }}));
  document.documentElement.dataset.charts = String(document.querySelectorAll("figure > svg").length);
}})();
</script>
</body></html>
"##,
            version = escape(&self.version)
        );
        h
    }

    fn what_if_charts(&self, h: &mut String) {
        let w = &self.what_if;
        let c = &self.configuration;
        let model = self.rates.model;
        let line = |points: &[Point], x: fn(&Point) -> f64, y: fn(&Point) -> f64| {
            points.iter().map(|p| (x(p), y(p))).collect::<Vec<_>>()
        };
        let model_line = |points: &[Point], x: fn(&Point) -> f64| {
            model.map(|g| Series {
                name: "G, the model",
                color: MODEL,
                points: points.iter().map(|p| (x(p), g)).collect(),
                dashed_after: None,
            })
        };
        let stage_series = |points: &[Point], x: fn(&Point) -> f64, dashed: Option<f64>| {
            let mut series = vec![
                Series {
                    name: "throughput",
                    color: THROUGHPUT,
                    points: line(points, x, |p| p.throughput),
                    dashed_after: dashed,
                },
                Series {
                    name: "F, fetch",
                    color: FETCH,
                    points: line(points, x, |p| p.fetch),
                    dashed_after: None,
                },
                Series {
                    name: "P(n), prep",
                    color: PREP,
                    points: line(points, x, |p| p.prep),
                    dashed_after: dashed,
                },
            ];
            series.extend(model_line(points, x));
            series
        };
        // Scaled to what limits training: a rate far above it (a cache serving a
        // million samples a second) would flatten everything else.
        let limits = [&w.cache, &w.threads, &w.bandwidth, &w.nodes]
            .iter()
            .flat_map(|points| points.iter().map(|p| p.throughput))
            .chain(model)
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        let y_max = Some(2.5 * limits);
        let charts = [
            (
                "Throughput vs cache size".to_string(),
                LineChart {
                    title: "Predicted throughput against the share of the dataset cached",
                    x_label: "dataset cached (%)",
                    y_label: "samples/s",
                    series: stage_series(&w.cache, |p| 100.0 * p.x, None),
                    log_x: false,
                    marker: Some((100.0 * c.cache_share, "now")),
                    y_max,
                },
            ),
            (
                "Throughput vs prep threads".to_string(),
                LineChart {
                    title: "Predicted throughput against the number of prep threads",
                    x_label: "prep threads (cores)",
                    y_label: "samples/s",
                    series: stage_series(&w.threads, |p| p.x, Some(w.threads_measured as f64)),
                    log_x: false,
                    marker: Some((c.prep_threads as f64, "now")),
                    y_max,
                },
            ),
            (
                "Throughput vs storage bandwidth".to_string(),
                LineChart {
                    title: "Predicted throughput against storage bandwidth",
                    x_label: "storage bandwidth (MB/s, log scale)",
                    y_label: "samples/s",
                    series: stage_series(&w.bandwidth, |p| p.x, None),
                    log_x: true,
                    marker: Some((self.rates.storage_bytes_per_s / 1e6, "measured")),
                    y_max,
                },
            ),
            (
                format!(
                    "Throughput per node vs nodes, each caching {:.0}% in a partitioned cache, {:.1} Gb/s network",
                    100.0 * w.node_cache_share,
                    w.network_bytes_per_s * 8.0 / 1e9
                ),
                LineChart {
                    title: "Predicted throughput per node against the number of nodes",
                    x_label: "nodes (log scale)",
                    y_label: "samples/s per node",
                    series: stage_series(&w.nodes, |p| p.x, None),
                    log_x: true,
                    marker: Some((1.0, "one node")),
                    y_max,
                },
            ),
        ];
        for (caption, chart) in charts {
            figure(h, &caption, &chart.svg());
        }
        h.push_str(
            r#"<p class="note">Dashed lines beyond the measured thread counts are extrapolated from the last measured gain per thread. Storage is shared by all nodes; a node's cache misses are served by the peer that caches the sample, at the network's bandwidth, before storage.</p>"#,
        );
    }
}

/// The remote what-if as a small table: what this node would make and receive, and the
/// cores elsewhere that make the rest.
fn remote_table(h: &mut String, r: &RemotePrep) {
    let rows = [
        (
            "a batch, as delivered",
            format!("{:.1} MB", r.batch_bytes / 1e6),
        ),
        (
            "this node's CPU to receive it",
            format!("{:.1} ms", r.receive_ms),
        ),
        (
            "a sample prepared here / on a remote core (sending included)",
            format!("{:.2} / {:.2} ms", r.prep_ms, r.remote_ms),
        ),
        (
            "prepared here while receiving",
            format!("{:.0} samples/s", r.local),
        ),
        ("received", format!("{:.0} samples/s", r.remote)),
        (
            "remote cores",
            format!(
                "{:.1} ({} host{} of {:.0} cores)",
                r.cores,
                r.hosts,
                if r.hosts == 1 { "" } else { "s" },
                r.host_cores
            ),
        ),
    ];
    h.push_str("<h2>What if batches were prepared elsewhere</h2>\n<table>");
    for (what, value) in rows {
        let _ = write!(
            h,
            r#"<tr><td>{}</td><td class="n">{}</td></tr>"#,
            escape(what),
            escape(&value)
        );
    }
    h.push_str(
        "</table>\n<p class=\"note\">Remote prep (<code>remote=</code>): this node's prep threads make what they can besides receiving the rest, made by cores elsewhere. The receive cost is a line through what the Ray testbed measured (5.9 ms for a uint8 batch of 64 × 224 × 224 × 3, 11.4 ms in float32, sent as its bytes), scaled by the batch's bytes.</p>\n",
    );
}

fn figure(h: &mut String, caption: &str, svg: &str) {
    let _ = writeln!(
        h,
        "<figure><figcaption>{}</figcaption>{svg}</figure>",
        escape(caption)
    );
}

/// Text broken into lines of at most `width` characters, at spaces (a word longer than
/// the width gets a line of its own).
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        if line > 0 && line + 1 + word.chars().count() > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.chars().count();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::whatif::{advise, sweep};
    use nostall::sched::model::Setup;

    fn report() -> Report {
        let rates = Rates {
            samples: 10_000,
            dataset_bytes: 1_000_000_000,
            prep: vec![400.0, 700.0],
            storage_bytes_per_s: 50e6,
            cache: 20_000.0,
            model: Some(600.0),
        };
        let setup = Setup {
            batch_size: 64,
            ..Setup::single(0.25, 2)
        };
        let prediction = rates.predict(&setup);
        Report {
            version: "test".into(),
            dataset: "/data/<train>".into(),
            configuration: Configuration {
                pipeline: "train preset, 224×224".into(),
                batch_size: 64,
                prep_threads: 2,
                fetch_threads: 1,
                cache: "minio".into(),
                cache_share: 0.25,
                storage: "local files, read cold".into(),
            },
            model: ModelRate::given(600.0).unwrap(),
            what_if: sweep(&rates, &setup, 0.25, 1.25e9),
            advice: advise(
                &rates,
                &setup,
                &prediction,
                16,
                150_528,
                &crate::RemoteCosts::default(),
            ),
            rates,
            measurements: None,
            prediction,
            observation: None,
            observed: None,
        }
    }

    #[test]
    fn the_costliest_samples_and_shards_are_named_in_text_and_page() {
        let mut r = report();
        let costly = |location: &str, samples| crate::observe::Costly {
            location: location.into(),
            samples,
            fetch_ms: 12.5,
            prep_ms: 40.25,
        };
        r.observation = Some(Observation {
            epochs: Vec::new(),
            warm_up: 0,
            slowest: vec![costly("/data/<huge>.jpg", 1)],
            slowest_shards: vec![costly("/data/shard-7.tar", 320)],
        });
        let text = r.text();
        assert!(
            text.contains("costliest samples of the last epoch run"),
            "{text}"
        );
        assert!(
            text.contains("12.5 ms     40.2 ms  /data/<huge>.jpg\n"),
            "{text}"
        );
        assert!(text.contains("/data/shard-7.tar (320 samples)"), "{text}");
        let html = r.html();
        assert!(html.contains("<td>/data/&lt;huge&gt;.jpg</td>"));
        assert!(html.contains("Costliest shards of the last epoch run"));
        let back: Report = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(back.observation, r.observation);
    }

    #[test]
    fn what_the_loader_chose_is_in_text_and_page() {
        let mut r = report();
        let epoch = |epoch, prepared_ahead| crate::observe::ObservedEpoch {
            epoch,
            samples: 640,
            seconds: 1.0,
            stall_seconds: 0.0,
            compute_seconds: 0.5,
            cache_hit_share: 0.0,
            storage_bytes: 0,
            complete: true,
            reads_in_flight: 24,
            read_ms: 20.5,
            read_tiers: vec![
                crate::observe::TierShare {
                    tier: "memory".into(),
                    reads: 24,
                    ms: Some(0.01),
                },
                crate::observe::TierShare {
                    tier: "storage".into(),
                    reads: 40,
                    ms: None,
                },
            ],
            prepared_ahead,
            prep_workers: 1,
            prep_reason: nostall::metrics::PrepReason::ConsumerNeeds,
        };
        r.observation = Some(Observation {
            epochs: vec![epoch(0, 0), epoch(1, 256), epoch(2, 192)],
            warm_up: 0,
            slowest: Vec::new(),
            slowest_shards: Vec::new(),
        });
        let text = r.text();
        assert!(text.contains("loader chose: 24 reads in flight"), "{text}");
        assert!(text.contains("for 20.50 ms a read"), "{text}");
        assert!(
            text.contains("of the next reads, 24 from memory at 0.01 ms, 40 from storage)"),
            "{text}"
        );
        assert!(text.contains("256, 192 samples prepared"), "{text}");
        assert!(
            text.contains("1 worker preparing (as many as keep a quarter ahead of the consumer"),
            "{text}"
        );
        assert!(r.html().contains("<p>Loader chose: 24 reads in flight"));
        let observation = r.observation.as_mut().unwrap();
        observation.epochs = (0..40).map(|e| epoch(e, e % 13)).collect();
        let text = r.text();
        assert!(
            text.contains(
                "the 39 epochs after the first each started ahead, with 0 to 12 samples (median 6)"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_page_holds_the_verdict_four_charts_and_its_data() {
        let r = report();
        let html = r.html();
        assert_eq!(
            html.matches("<figure>").count(),
            5,
            "breakdown + four what-ifs"
        );
        assert!(html.contains(&escape(&r.advice.verdict)));
        assert!(html.contains("/data/&lt;train&gt;"), "the path is escaped");
        assert!(html.contains("What if batches were prepared elsewhere"));
        assert!(
            html.contains("<td class=\"n\">9.6 MB</td>"),
            "a uint8 batch of 64"
        );
        // The embedded JSON is the report, intact.
        let start = html.find(r#"id="report-data">"#).unwrap() + r#"id="report-data">"#.len();
        let end = start + html[start..].find("</script>").unwrap();
        let back: Report = serde_json::from_str(&html[start..end].replace("<\\/", "</")).unwrap();
        assert_eq!(back.rates, r.rates);
        // Nothing to fetch: no external script, style, image or font.
        assert!(!html.contains("src=") && !html.contains("https://"));
        assert!(!html.contains("<link"));
    }

    #[test]
    fn the_summary_names_rates_prediction_and_verdict() {
        let text = report().text();
        assert!(text.contains("G  model"), "{text}");
        assert!(text.contains("P  prep, 2 thread(s)"), "{text}");
        assert!(text.contains("predicted: "), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 160), "{text}");
    }

    #[test]
    fn the_json_gives_back_the_rates() {
        let r = report();
        assert_eq!(Report::rates_from_json(&r.json()).unwrap(), r.rates);
        let err = Report::rates_from_json(r#"{"version": "x"}"#).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err}");
    }

    #[test]
    fn wrap_breaks_at_spaces() {
        assert_eq!(wrap("aa bb cc dd", 5), "aa bb\ncc dd");
    }
}
