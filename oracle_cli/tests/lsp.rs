//! `oracle lsp` over stdio, as an editor drives it: initialize, initialized, didOpen of a plan
//! with an error, its publishDiagnostics (code and range), hover, definition, completion,
//! shutdown and exit (exit code 0). Every read has a deadline, so a server that hangs fails the
//! test instead of stalling it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

/// How long one answer may take: generous for a loaded CI machine, short next to a hang.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

struct Client {
    child: Child,
    stdin: ChildStdin,
    messages: Receiver<Value>,
    next_id: i64,
}

/// One message of the base protocol: `Content-Length` header, blank line, JSON body.
fn read_message(r: &mut impl BufRead) -> Option<Value> {
    let mut len = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length: ") {
            len = v.parse::<usize>().ok();
        }
    }
    let mut body = vec![0; len?];
    r.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

impl Client {
    fn start() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_oracle"))
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, messages) = channel();
        std::thread::spawn(move || {
            while let Some(m) = read_message(&mut stdout) {
                if tx.send(m).is_err() {
                    break;
                }
            }
        });
        Client {
            child,
            stdin,
            messages,
            next_id: 1,
        }
    }

    fn send(&mut self, msg: Value) {
        let body = serde_json::to_string(&msg).unwrap();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and waits for its response, skipping notifications.
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let m = self.recv(method);
            if m["id"] == json!(id) {
                assert!(m.get("error").is_none(), "{method}: {m}");
                return m["result"].clone();
            }
        }
    }

    fn recv(&mut self, waiting_for: &str) -> Value {
        match self.messages.recv_timeout(READ_TIMEOUT) {
            Ok(m) => m,
            Err(e) => {
                let _ = self.child.kill();
                panic!("no message from `oracle lsp` while waiting for {waiting_for}: {e}");
            }
        }
    }

    /// The next notification of `method`.
    fn notification(&mut self, method: &str) -> Value {
        loop {
            let m = self.recv(method);
            if m["method"] == method {
                return m["params"].clone();
            }
        }
    }
}

const URI: &str = "file:///tmp/oracle-lsp-test/typo.plan";

/// A plan whose second step calls a tool that does not exist (E0205). The `é` before it on its
/// line makes byte and UTF-16 columns differ.
const PLAN: &str = "plan typo version 1\n\ngrant fs:read:data/**\n\nread = fs.read { path: \"data/é.txt\" }\nstats = text.cout { text: read.text }\n";

fn pos(line: u32, character: u32) -> Value {
    json!({"textDocument": {"uri": URI}, "position": {"line": line, "character": character}})
}

#[test]
fn the_server_answers_an_editor_over_stdio() {
    let mut c = Client::start();
    let init = c.request(
        "initialize",
        json!({"processId": null, "rootUri": null, "capabilities": {}}),
    );
    let caps = &init["capabilities"];
    assert_eq!(caps["textDocumentSync"], json!(1), "full sync: {init}");
    assert_eq!(caps["hoverProvider"], json!(true));
    assert_eq!(caps["definitionProvider"], json!(true));
    assert!(caps["completionProvider"].is_object());
    c.notify("initialized", json!({}));

    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": URI, "languageId": "oracle-plan", "version": 1, "text": PLAN}}),
    );
    let published = c.notification("textDocument/publishDiagnostics");
    assert_eq!(published["uri"], URI);
    let diags = published["diagnostics"].as_array().unwrap();
    assert_eq!(diags.len(), 1, "{published}");
    assert_eq!(diags[0]["code"], "E0205");
    assert_eq!(diags[0]["source"], "oracle");
    assert!(
        diags[0]["message"].as_str().unwrap().contains("text.cout"),
        "{}",
        diags[0]
    );
    // `text.cout` on line 5 (0-based), columns 8 to 17.
    assert_eq!(
        diags[0]["range"],
        json!({"start": {"line": 5, "character": 8}, "end": {"line": 5, "character": 17}})
    );

    // Hover on `fs.read` (line 4, column 9): its signature and schemas.
    let hover = c.request("textDocument/hover", pos(4, 9));
    let text = hover["contents"]["value"].as_str().unwrap();
    assert!(text.contains("fs.read { path: string }"), "{text}");
    assert!(text.contains("output schema"), "{text}");
    // Hover on the step `read` where it is used (`read.text`, line 5): its tool.
    let hover = c.request("textDocument/hover", pos(5, 28));
    let text = hover["contents"]["value"].as_str().unwrap();
    assert!(text.starts_with("step `read` = `fs.read`"), "{text}");

    // Definition of `read` from `read.text`: the step's name on line 4.
    let def = c.request("textDocument/definition", pos(5, 28));
    assert_eq!(def["uri"], URI);
    assert_eq!(
        def["range"],
        json!({"start": {"line": 4, "character": 0}, "end": {"line": 4, "character": 4}})
    );

    // Completion: fields of `read`'s output after `read.` once the text changes.
    let edited = PLAN.replace(
        "text.cout { text: read.text }",
        "text.split { text: read., }",
    );
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": edited}]}),
    );
    let published = c.notification("textDocument/publishDiagnostics");
    assert!(!published["diagnostics"].as_array().unwrap().is_empty());
    let labels = |items: Value| -> Vec<String> {
        let items = items.as_array().cloned().unwrap_or_default();
        items
            .iter()
            .map(|i| i["label"].as_str().unwrap().to_owned())
            .collect()
    };
    let fields = labels(c.request("textDocument/completion", pos(5, 32)));
    assert_eq!(fields, ["bytes", "text"]);
    // Tool names after `stats = te`.
    let tools = labels(c.request("textDocument/completion", pos(5, 10)));
    assert!(tools.contains(&"text.count".to_owned()) && tools.contains(&"fs.read".to_owned()));
    // Argument names after `text.split { text: read., `: the one not given yet.
    let args = labels(c.request("textDocument/completion", pos(5, 34)));
    assert_eq!(args, ["separator"]);

    let shutdown = c.request("shutdown", Value::Null);
    assert_eq!(shutdown, Value::Null);
    c.notify("exit", Value::Null);
    drop(c.stdin);
    let status = c.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// A document full of mistakes (2,000 unknown names) is answered with at most
/// `DIAGNOSTICS_MAX` diagnostics and one more that counts the rest (issue 53, item 5): one
/// change costs the server a bounded message, however many mistakes the text holds.
#[test]
fn a_document_full_of_mistakes_gets_a_bounded_list() {
    const UNKNOWN: usize = 2_000;
    let max = oracle_plan::diagnostic::DIAGNOSTICS_MAX;
    let mut text = String::from("plan typos version 1\n");
    for i in 0..UNKNOWN {
        text.push_str(&format!("s{i} = text.count {{ text: t{i} }}\n"));
    }
    let mut c = Client::start();
    c.request(
        "initialize",
        json!({"processId": null, "rootUri": null, "capabilities": {}}),
    );
    c.notify("initialized", json!({}));
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": URI, "languageId": "oracle-plan", "version": 1, "text": text}}),
    );
    let published = c.notification("textDocument/publishDiagnostics");
    let diags = published["diagnostics"].as_array().unwrap();
    assert_eq!(diags.len(), max + 1, "{}", diags.len());
    assert!(diags[..max].iter().all(|d| d["code"] == "E0204"));
    // The first shown is the first in the text; the last counts the rest, at the next one.
    assert_eq!(diags[0]["range"]["start"]["line"], 1);
    let more = &diags[max];
    assert_eq!(more["code"], "E0226");
    let message = more["message"].as_str().unwrap();
    let rest = UNKNOWN - max;
    assert!(
        message.starts_with(&format!("and {rest} more diagnostics ({rest} errors)")),
        "{message}"
    );
    assert_eq!(more["range"]["start"]["line"], max + 1);
    c.request("shutdown", Value::Null);
    c.notify("exit", Value::Null);
    drop(c.stdin);
    assert_eq!(c.child.wait().unwrap().code(), Some(0));
}

/// Address space `oracle lsp` gets in the length tests (KiB): far below the 3 GB a trusted
/// `Content-Length` would allocate, far above what the server needs.
const ADDRESS_SPACE_KIB: u64 = 2 << 20;

/// `oracle lsp` under `ulimit -v`, its stdout read message by message.
fn bounded_server() -> Client {
    let mut child = Command::new("sh")
        .args([
            "-c",
            &format!("ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" lsp"),
            env!("CARGO_BIN_EXE_oracle"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, messages) = channel();
    std::thread::spawn(move || {
        while let Some(m) = read_message(&mut stdout) {
            if tx.send(m).is_err() {
                break;
            }
        }
    });
    Client {
        child,
        stdin,
        messages,
        next_id: 1,
    }
}

/// Waits for the child to exit (within `READ_TIMEOUT`): its status and stderr.
fn exited(c: &mut Client) -> (std::process::ExitStatus, String) {
    let deadline = std::time::Instant::now() + READ_TIMEOUT;
    loop {
        if let Some(status) = c.child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(c.child.stderr.as_mut().unwrap(), &mut err).unwrap();
            return (status, err);
        }
        if std::time::Instant::now() > deadline {
            let _ = c.child.kill();
            panic!("`oracle lsp` still running after a refused length");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `Content-Length` above `LSP_MESSAGE_BYTES_MAX` (3 GB, and one byte over the limit, as the
/// first message and in the middle of a session) is answered with a JSON-RPC error and the
/// server exits 2 at once, without waiting for the body it announced or allocating it: under a
/// 2 GiB address space it neither aborts (no signal) nor hangs (issue 53, item 6).
#[test]
fn a_message_longer_than_the_limit_is_refused_unread() {
    use std::os::unix::process::ExitStatusExt;
    let limit = oracle_lsp::transport::LSP_MESSAGE_BYTES_MAX;
    for (length, mid_session) in [
        ("3000000000".to_owned(), false),
        ((limit + 1).to_string(), false),
        ((limit + 1).to_string(), true),
    ] {
        let mut c = bounded_server();
        if mid_session {
            c.request(
                "initialize",
                json!({"processId": null, "rootUri": null, "capabilities": {}}),
            );
        }
        // The header alone; stdin stays open, so a server waiting for the body would hang.
        write!(c.stdin, "Content-Length: {length}\r\n\r\n").unwrap();
        c.stdin.flush().unwrap();
        let answer = c.recv("the refusal");
        assert_eq!(answer["id"], Value::Null, "{answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(&length), "{message}");
        assert!(message.contains("lsp_message_bytes_max"), "{message}");
        let (status, err) = exited(&mut c);
        assert_eq!(status.signal(), None, "killed by a signal: {err}");
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(err.contains("lsp_message_bytes_max"), "{err}");
    }
}
