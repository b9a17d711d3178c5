//! The base protocol on stdin and stdout, framed here rather than by lsp-server's own reader:
//! that one sizes a buffer from a message's `Content-Length` before reading a byte of it, so a
//! huge value aborted the server and 3 GB took 2.9 GB (issue 53, item 6). Here the headers are
//! read within [`HEADER_BYTES_MAX`], a length above [`LSP_MESSAGE_BYTES_MAX`] is answered with
//! an error and the connection closed without reading on, and a body grows only as its bytes
//! arrive. Messages then reach lsp-server's [`Connection`] over rendezvous channels, as its own
//! stdio transport hands them over, so the handshakes and the server loop are unchanged.

use std::io::{self, BufRead, Read, Write};
use std::thread::{self, JoinHandle};

use crossbeam_channel::{Sender, bounded};
use lsp_server::{Connection, Message};

use crate::LspError;

/// Largest message read, in bytes of its body. The largest a client sends is a document's
/// whole text (`didOpen`, `didChange`); one over `PLAN_BYTES_MAX` (32 MiB) is not analysed
/// anyway, and twice that leaves room for its JSON escapes. A longer message is refused before
/// any of it is read, and the server exits.
pub const LSP_MESSAGE_BYTES_MAX: u64 = 2 * oracle_plan::PLAN_BYTES_MAX;

/// Most bytes of one message's headers. The protocol has two headers (`Content-Length` and
/// `Content-Type`), well under this; a client sending more is not speaking it.
pub const HEADER_BYTES_MAX: u64 = 4096;

/// JSON-RPC's codes for a message that cannot be taken: not JSON, or not a request at all.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;

/// Why a message from the client was refused (the server answers it, then closes).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(
        "a message of {given} bytes (its Content-Length), more than lsp_message_bytes_max = {LSP_MESSAGE_BYTES_MAX}"
    )]
    TooLarge { given: String },
    #[error("a message's headers are longer than header_bytes_max = {HEADER_BYTES_MAX} bytes")]
    HeadersTooLong,
    #[error("a malformed header: {0}")]
    Header(String),
    #[error("a message without a Content-Length header")]
    NoLength,
    #[error("the input ends after {got} of the message's {length} bytes")]
    Truncated { got: u64, length: u64 },
    #[error("a message that is not JSON-RPC: {0}")]
    NotJsonRpc(String),
}

impl Refused {
    fn code(&self) -> i64 {
        match self {
            Refused::NotJsonRpc(_) => PARSE_ERROR,
            _ => INVALID_REQUEST,
        }
    }
}

/// Why the reader stopped: a refused message, or the input failing.
#[derive(Debug)]
enum Stop {
    Refused(Refused),
    Io(io::Error),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Stop {
        Stop::Io(e)
    }
}

impl From<Refused> for Stop {
    fn from(e: Refused) -> Stop {
        Stop::Refused(e)
    }
}

/// One message's body from `r`; `Ok(None)` when the input ends between messages.
fn read_frame(r: &mut impl BufRead) -> Result<Option<Vec<u8>>, Stop> {
    let mut length = None;
    let mut left = HEADER_BYTES_MAX;
    let mut first = true;
    loop {
        if left == 0 {
            return Err(Refused::HeadersTooLong.into());
        }
        let mut line = Vec::new();
        let n = r.by_ref().take(left).read_until(b'\n', &mut line)?;
        match (n, first) {
            (0, true) => return Ok(None),
            (0, false) => {
                return Err(Refused::Header("the input ends inside the headers".into()).into());
            }
            _ => first = false,
        }
        left = left.saturating_sub(n as u64);
        let Some(text) = line.strip_suffix(b"\r\n") else {
            return Err(if left == 0 {
                Refused::HeadersTooLong
            } else {
                Refused::Header(shown(&line))
            }
            .into());
        };
        if text.is_empty() {
            break;
        }
        let header = std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.split_once(':'));
        let Some((name, value)) = header else {
            return Err(Refused::Header(shown(text)).into());
        };
        if name.eq_ignore_ascii_case("Content-Length") {
            length = Some(parse_length(value.trim())?);
        }
    }
    let length = length.ok_or(Refused::NoLength)?;
    // Grown as bytes arrive: a length the client never sends costs nothing.
    let mut body = Vec::new();
    r.take(length).read_to_end(&mut body)?;
    let got = body.len() as u64;
    if got < length {
        return Err(Refused::Truncated { got, length }.into());
    }
    Ok(Some(body))
}

/// A `Content-Length` value within [`LSP_MESSAGE_BYTES_MAX`]. A number too long for 64 bits is
/// past it too.
fn parse_length(value: &str) -> Result<u64, Refused> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refused::Header(format!(
            "Content-Length: {}",
            shown(value.as_bytes())
        )));
    }
    match value.parse::<u64>() {
        Ok(n) if n <= LSP_MESSAGE_BYTES_MAX => Ok(n),
        _ => Err(Refused::TooLarge {
            given: shown(value.as_bytes()),
        }),
    }
}

/// Most characters of a refused header quoted back.
const SHOWN_CHARS_MAX: usize = 40;

fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .take(SHOWN_CHARS_MAX)
        .collect()
}

/// The reader's loop: each message to the server until the input ends, `exit` is read (the
/// protocol's last word, as lsp-server's reader stops), or a message is refused.
fn read_messages(r: &mut impl BufRead, to_server: &Sender<Message>) -> Result<(), Stop> {
    while let Some(body) = read_frame(r)? {
        let msg: Message = serde_json::from_slice(&body)
            .map_err(|e| Refused::NotJsonRpc(shown(e.to_string().as_bytes())))?;
        let exit = matches!(&msg, Message::Notification(n) if n.method == "exit");
        if to_server.send(msg).is_err() || exit {
            break;
        }
    }
    Ok(())
}

/// Answers a refused message on `out`: a JSON-RPC error without an id (none was read).
fn answer_refusal(out: &mut impl Write, e: &Refused) -> io::Result<()> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": e.code(), "message": format!("oracle lsp: {e}; closing the connection")},
    })
    .to_string();
    write!(out, "Content-Length: {}\r\n\r\n{body}", body.len())?;
    out.flush()
}

/// The reader and writer threads of a connection over stdin and stdout.
pub struct Transport {
    reader: JoinHandle<Result<(), Stop>>,
    writer: JoinHandle<io::Result<()>>,
}

/// A connection over stdin and stdout, framed as this module says.
pub fn stdio() -> (Connection, Transport) {
    let (to_server, from_client) = bounded::<Message>(0);
    let (to_client, from_server) = bounded::<Message>(0);
    let writer = thread::spawn(move || {
        for msg in from_server {
            // Locked per message, so a refusal from the reader never lands inside another.
            msg.write(&mut io::stdout().lock())?;
        }
        Ok(())
    });
    let reader = thread::spawn(move || {
        let read = read_messages(&mut io::stdin().lock(), &to_server);
        if let Err(Stop::Refused(e)) = &read {
            // The client may have gone too; the refusal is still the reason to stop.
            let _ = answer_refusal(&mut io::stdout().lock(), e);
        }
        read
    });
    let conn = Connection {
        sender: to_client,
        receiver: from_client,
    };
    (conn, Transport { reader, writer })
}

impl Transport {
    /// Waits for both threads (the writer ends once the connection's sender is dropped): why
    /// the reader stopped, if a message was refused or the input failed.
    pub fn join(self) -> Result<(), LspError> {
        let gone = || io::Error::other("an I/O thread of the language server panicked");
        let read = self.reader.join().map_err(|_| gone())?;
        let written = self.writer.join().map_err(|_| gone())?;
        match read {
            Err(Stop::Refused(e)) => Err(LspError::Refused(e)),
            Err(Stop::Io(e)) => Err(LspError::Io(e)),
            Ok(()) => Ok(written?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(input: &[u8]) -> Result<Option<Vec<u8>>, Stop> {
        read_frame(&mut io::Cursor::new(input.to_vec()))
    }

    fn refused(input: &[u8]) -> Refused {
        match frame(input) {
            Err(Stop::Refused(e)) => e,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }

    #[test]
    fn messages_are_framed_by_their_length_within_the_limits() {
        let body = br#"{"jsonrpc":"2.0","method":"exit"}"#;
        let mut input =
            format!("Content-Length: {}\r\nContent-Type: x\r\n\r\n", body.len()).into_bytes();
        input.extend_from_slice(body);
        assert_eq!(frame(&input).unwrap(), Some(body.to_vec()));
        assert!(frame(b"").unwrap().is_none());
        // Just within the limit is read (here, it is cut short by the end of the input).
        let at = format!("Content-Length: {LSP_MESSAGE_BYTES_MAX}\r\n\r\nab");
        assert!(matches!(
            refused(at.as_bytes()),
            Refused::Truncated { got: 2, .. }
        ));
        for len in [
            (LSP_MESSAGE_BYTES_MAX + 1).to_string(),
            "3000000000".to_owned(),
            "99999999999999999999999999".to_owned(),
        ] {
            let head = format!("Content-Length: {len}\r\n\r\n");
            assert!(
                matches!(refused(head.as_bytes()), Refused::TooLarge { .. }),
                "{len}"
            );
        }
        assert!(matches!(
            refused(b"Content-Length: -1\r\n\r\n"),
            Refused::Header(_)
        ));
        assert!(matches!(
            refused(b"Content-Type: x\r\n\r\n{}"),
            Refused::NoLength
        ));
        assert!(matches!(
            refused(b"Content-Length: 2\n\n{}"),
            Refused::Header(_)
        ));
        let long = format!("X: {}\r\n", "y".repeat(HEADER_BYTES_MAX as usize));
        assert!(matches!(refused(long.as_bytes()), Refused::HeadersTooLong));
        let many = "X: y\r\n".repeat(HEADER_BYTES_MAX as usize);
        assert!(matches!(refused(many.as_bytes()), Refused::HeadersTooLong));
    }

    #[test]
    fn a_refusal_is_a_json_rpc_error_without_an_id() {
        let mut out = Vec::new();
        let e = Refused::TooLarge {
            given: "3000000000".into(),
        };
        answer_refusal(&mut out, &e).unwrap();
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(head, format!("Content-Length: {}", body.len()));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["id"], serde_json::Value::Null);
        assert_eq!(v["error"]["code"], INVALID_REQUEST);
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("lsp_message_bytes_max"), "{message}");
    }
}
