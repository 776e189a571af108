//! The plugin running in the background (`status --watch`, `gate serve`), its stdout and
//! stderr read as they come.

use super::*;

/// The plugin running in the background, its stdout and stderr read as they come, so a test
/// can wait on what it prints or says (a condition) instead of sleeping.
pub struct Running {
    child: std::process::Child,
    stdout: Shared,
    stderr: Shared,
    readers: Vec<std::thread::JoinHandle<()>>,
    what: String,
}

type Shared = std::sync::Arc<std::sync::Mutex<String>>;

/// A thread appending each whole line of `pipe` to the returned text.
fn read_lines(pipe: impl std::io::Read + Send + 'static) -> (Shared, std::thread::JoinHandle<()>) {
    use std::io::BufRead;
    let text = Shared::default();
    let sink = text.clone();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut s = sink.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    (text, reader)
}

impl Running {
    pub fn start(args: &[&str]) -> Self {
        Self::start_env(&[], args)
    }

    pub fn start_env(env: &[(&str, &str)], args: &[&str]) -> Self {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-raft"));
        c.args(args)
            .env("KUBECONFIG", &world().kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("kubectl-raft starts");
        let (stdout, out_reader) = read_lines(child.stdout.take().expect("stdout piped"));
        let (stderr, err_reader) = read_lines(child.stderr.take().expect("stderr piped"));
        Running {
            child,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
            what: format!("kubectl raft {}", args.join(" ")),
        }
    }

    /// Its exit status, if it has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn stderr_so_far(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn stdout_so_far(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Polls until `seen` holds (Ok) or it exits first (its status); panics after `limit`,
    /// naming `what` it waited for.
    fn poll(
        &mut self,
        what: &str,
        limit: Duration,
        seen: impl Fn(&Self) -> bool,
    ) -> Result<(), std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if seen(self) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(status);
            }
            assert!(
                start.elapsed() < limit,
                "no {what} from {} within {limit:?}:\n{}\n{}",
                self.what,
                self.stdout_so_far(),
                self.stderr_so_far()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `seen` holds of its stdout so far (whole lines only); panics after `limit`
    /// or if it exits first, naming `what` it waited for.
    pub fn wait_for_stdout(&mut self, what: &str, limit: Duration, seen: impl Fn(&str) -> bool) {
        if let Err(status) = self.poll(what, limit, |r| seen(&r.stdout_so_far())) {
            panic!(
                "{} exited ({status}) before {what}:\n{}\n{}",
                self.what,
                self.stdout_so_far(),
                self.stderr_so_far()
            );
        }
    }

    /// Waits until its stderr contains `text` (panics after `limit`, or if it exits first).
    pub fn wait_for(&mut self, text: &str, limit: Duration) {
        let what = format!("{text:?} on its stderr");
        if let Err(status) = self.poll(&what, limit, |r| r.stderr_so_far().contains(text)) {
            panic!(
                "{} exited ({status}) before saying {text:?}:\n{}",
                self.what,
                self.stderr_so_far()
            );
        }
    }

    /// Waits until its stderr contains `text` (true) or it exits (false); panics after `limit`.
    pub fn says_or_exits(&mut self, text: &str, limit: Duration) -> bool {
        let what = format!("{text:?} on its stderr, nor an exit,");
        self.poll(&what, limit, |r| r.stderr_so_far().contains(text))
            .is_ok()
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
        let status = self.child.wait().expect("it ends");
        for r in std::mem::take(&mut self.readers) {
            let _ = r.join();
        }
        (status.code(), self.stdout_so_far(), self.stderr_so_far())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
