//! The plugin running in the background (`status --watch`, `gate serve`), its stderr read as
//! it comes.

use super::*;

/// The plugin running in the background, its stderr read as it comes, so a test can wait on
/// what it says (a condition) instead of sleeping.
pub struct Running {
    child: std::process::Child,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
    what: String,
}

impl Running {
    pub fn start(args: &[&str]) -> Self {
        Self::start_env(&[], args)
    }

    pub fn start_env(env: &[(&str, &str)], args: &[&str]) -> Self {
        use std::io::BufRead;
        let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-raft"));
        c.args(args)
            .env("KUBECONFIG", &world().kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("kubectl-raft starts");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("stderr piped");
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Running {
            child,
            stderr,
            reader: Some(reader),
            what: format!("kubectl raft {}", args.join(" ")),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn stderr_so_far(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until its stderr contains `text` (panics after `limit`, or if it exits first).
    pub fn wait_for(&mut self, text: &str, limit: Duration) {
        let what = format!("{:?} on the stderr of {}", text, self.what);
        let start = Instant::now();
        loop {
            if self.stderr_so_far().contains(text) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before saying {text:?}:\n{}",
                    self.what,
                    self.stderr_so_far()
                );
            }
            assert!(
                start.elapsed() < limit,
                "no {what} within {limit:?}:\n{}",
                self.stderr_so_far()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until its stderr contains `text` (true) or it exits (false); panics after `limit`.
    pub fn says_or_exits(&mut self, text: &str, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.stderr_so_far().contains(text) {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            assert!(
                start.elapsed() < limit,
                "{} neither said {text:?} nor exited within {limit:?}:\n{}",
                self.what,
                self.stderr_so_far()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for it to end (killed after `limit`): exit code, stdout, stderr.
    pub fn finish(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() {
            if start.elapsed() > limit {
                let _ = self.child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            use std::io::Read;
            let _ = o.read_to_string(&mut out);
        }
        let status = self.child.wait().expect("it ends");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status.code(), out, self.stderr_so_far())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
