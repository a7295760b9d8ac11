//! Headless Chromium driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: commands on fd 3, answers and events on fd
//! 4, each a JSON message ended by a NUL byte; here one socket pair), so a test can keep a page
//! open while it kills nodes, and read what the page shows at any moment.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A headless Chromium, killed when dropped.
pub struct Browser {
    child: Child,
    commands: UnixStream,
    messages: Receiver<Value>,
    next_id: u64,
    /// Console lines and uncaught exceptions of every page, as they came.
    pub console: Arc<Mutex<Vec<String>>>,
    _profile: tempfile::TempDir,
}

/// A page open in a [`Browser`].
pub struct Page {
    session: String,
}

impl Browser {
    /// Starts Chromium (the Debian package; `.ci/run` installs it).
    pub fn launch() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // One socket pair carries both ways: Chromium reads fd 3 and
        // writes fd 4, both its end.
        let (commands, chrome_end) = UnixStream::pair().unwrap();
        let answers = commands.try_clone().unwrap();
        let fd = chrome_end.as_raw_fd();
        assert!(fd > 4, "socket fd {fd}");
        let mut command = Command::new("chromium");
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only dup2, which is async-signal-safe, runs in the child
        // between fork and exec.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                if nix::libc::dup2(fd, 3) < 0 || nix::libc::dup2(fd, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .expect("headless Chromium (apt-get install chromium; .ci/run does)");
        drop(chrome_end);
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(answers);
            loop {
                let mut message = Vec::new();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                message.pop();
                if let Ok(value) = serde_json::from_slice::<Value>(&message) {
                    if tx.send(value).is_err() {
                        return;
                    }
                }
            }
        });
        Browser {
            child,
            commands,
            messages,
            next_id: 0,
            console: Arc::default(),
            _profile: profile,
        }
    }

    /// Sends `method` with `params` (to the page's session, if given) and
    /// answers its result; events that arrive meanwhile are taken in.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = match self.messages.recv_timeout(left) {
                Ok(message) => message,
                Err(RecvTimeoutError::Timeout) => panic!("Chromium did not answer {method}"),
                Err(RecvTimeoutError::Disconnected) => panic!("Chromium exited during {method}"),
            };
            if message["id"] == json!(id) {
                if let Some(error) = message.get("error") {
                    panic!("{method}: {error}");
                }
                return message["result"].clone();
            }
            self.take_event(&message);
        }
    }

    fn take_event(&self, message: &Value) {
        let params = &message["params"];
        let line = match message["method"].as_str() {
            Some("Runtime.consoleAPICalled") => format!(
                "console.{}: {}",
                params["type"].as_str().unwrap_or("?"),
                params["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| a["value"].to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            Some("Runtime.exceptionThrown") => format!(
                "exception: {}",
                params["exceptionDetails"]["exception"]["description"]
                    .as_str()
                    .unwrap_or_else(|| params["exceptionDetails"]["text"].as_str().unwrap_or("?"))
            ),
            _ => return,
        };
        self.console.lock().unwrap().push(line);
    }

    /// Opens `url` in a new page, its console and exceptions recorded.
    pub fn open(&mut self, url: &str) -> Page {
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        let session = attached["sessionId"].as_str().unwrap().to_string();
        self.call(Some(&session), "Runtime.enable", json!({}));
        self.call(Some(&session), "Page.enable", json!({}));
        self.call(Some(&session), "Page.navigate", json!({ "url": url }));
        Page { session }
    }

    /// The value of the JavaScript `expression` in `page` now.
    pub fn eval(&mut self, page: &Page, expression: &str) -> Value {
        let result = self.call(
            Some(&page.session),
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        result["result"]["value"].clone()
    }

    /// The page's text as shown now (`document.body.innerText`).
    pub fn text(&mut self, page: &Page) -> String {
        self.eval(page, "document.body ? document.body.innerText : ''")
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Saves what `page` shows, 1100 pixels wide and as tall as the page,
    /// as a PNG at `path`.
    pub fn screenshot(&mut self, page: &Page, path: &std::path::Path) {
        self.call(
            Some(&page.session),
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": 1100, "height": 800, "deviceScaleFactor": 1, "mobile": false }),
        );
        let shot = self.call(
            Some(&page.session),
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true }),
        );
        let png = base64_decode(shot["data"].as_str().unwrap());
        std::fs::write(path, png).unwrap();
    }

    /// Waits until `expression` is true in `page`, looking every 50 ms for
    /// at most `patience`: how long it took, or `None`.
    pub fn wait_for(
        &mut self,
        page: &Page,
        expression: &str,
        patience: Duration,
    ) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < patience {
            if self.eval(page, expression) == json!(true) {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bytes of standard base64 `text` (the screenshot's encoding).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text.bytes().filter(|c| *c != b'=').map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let bits = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, d)| acc | u32::from(*d) << (18 - 6 * i));
        let bytes = bits.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}
