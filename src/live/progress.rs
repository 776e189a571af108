//! Progress for long verbs: on a terminal, one live line per task (indicatif); otherwise
//! plain timestamped lines on stderr, one per change, so logs and CI show what happened when.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

pub struct Progress {
    multi: Option<MultiProgress>,
    /// Off a terminal, a timestamped line per change (drain, restart); `false` for a verb
    /// whose one step is its result (yield): nothing then.
    log: bool,
}

/// One task's line: `db/etcd: evicting etcd-0 (12s)`.
pub struct Line {
    bar: Option<ProgressBar>,
    label: String,
    log: bool,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// Lines on stderr when it is a terminal; nothing otherwise.
    pub fn new() -> Self {
        Progress {
            multi: std::io::stderr().is_terminal().then(MultiProgress::new),
            log: true,
        }
    }

    /// Live lines on a terminal, and no progress at all otherwise.
    pub fn quiet() -> Self {
        Progress {
            log: false,
            ..Self::new()
        }
    }

    pub fn line(&self, label: &str) -> Line {
        let bar = self.multi.as_ref().map(|m| {
            let b = m.add(ProgressBar::new_spinner());
            b.set_style(
                ProgressStyle::with_template("{spinner} {prefix}: {msg} ({elapsed})")
                    .expect("valid template"),
            );
            b.set_prefix(label.to_string());
            b.enable_steady_tick(Duration::from_millis(100));
            b
        });
        Line {
            bar,
            label: label.to_string(),
            log: self.log,
        }
    }
}

pub fn timestamp() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%H:%M:%S")
        .to_string()
}

impl Line {
    /// What the task does now (replaces the line on a terminal).
    pub fn set(&self, msg: &str) {
        let msg = crate::render::clean(msg);
        match &self.bar {
            Some(b) => {
                b.reset_elapsed();
                b.set_message(msg.to_string());
            }
            None if self.log => eprintln!("{} {}: {msg}", timestamp(), self.label),
            None => {}
        }
    }

    /// Something that happened, kept above the live lines.
    pub fn note(&self, msg: &str) {
        let msg = crate::render::clean(msg);
        match &self.bar {
            Some(b) => b.println(format!("{} {}: {msg}", timestamp(), self.label)),
            None => eprintln!("{} {}: {msg}", timestamp(), self.label),
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
