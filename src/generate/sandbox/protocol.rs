//! The wire protocol between the host and the harness: newline-delimited JSON frames on one
//! `AF_UNIX` socket (descriptor 3 in the child).
//!
//! | direction | frame |
//! |---|---|
//! | host → child | `{"type":"init","program":"program.py","task_context":..,"n":..,"seed":..,"llm":bool}` |
//! | child → host | `{"type":"axes","axes":[..]}` — the names of `DIVERSITY_AXES`, before generating |
//! | child → host | `{"type":"llm","id":k,"requests":[{"prompt","system","temperature","max_tokens","schema"?}]}` |
//! | host → child | `{"type":"llm_result","id":k,"results":[{"text":..,"schema_mode"?:..} or {"error":..}]}` |
//! | child → host | `{"type":"result","axes":[..],"rows":[..],"count":k,"truncated":bool}` |
//! | child → host | `{"type":"error","stage":"import|contract|generate|resource","error_type","message","traceback"}` |
//!
//! A request's optional `schema` (a JSON object schema, at most [`MAX_SCHEMA_BYTES`]) becomes
//! the [`ChatRequest::response_schema`] of the call (role `generator`): the endpoint is asked to
//! constrain the answer to it, and the result says how in `schema_mode` (`json_schema`,
//! `json_object` or `unconstrained`; see [`crate::llm::schema`]).
//!
//! Everything on the socket comes from the program's process, so the harness's own checks
//! prove nothing: a program can write forged frames on the descriptor. The host therefore
//! parses every frame strictly (unknown types or fields, wrong types, a result before the
//! axes, a result whose axes differ from the declared ones, impossible counts: all
//! [`Stage::Protocol`] failures) and validates the rows itself (`generator::validate`).

use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::{neutralise, RawResult, SandboxConfig, Stage, PROGRAM_FILE};
use crate::dialogue::{Role, Turn};
use crate::llm::{CallRole, ChatModel, ChatRequest, ResponseSchema};

/// Longest error message kept from an `error` frame, in characters.
const MAX_MESSAGE: usize = 2000;
/// Largest answer schema a program may send with one request, in bytes of JSON.
pub(crate) const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// A frame sent by the child. Unknown types and unknown fields are refused.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ChildFrame {
    /// The program's axis names, sent once before `generate_personas_detailed` is called.
    Axes { axes: Vec<String> },
    /// LLM requests.
    Llm { id: u64, requests: Vec<LlmRequest> },
    /// The program's rows.
    Result {
        axes: Vec<String>,
        rows: Vec<Value>,
        count: u64,
        truncated: bool,
    },
    /// The program failed.
    Error {
        stage: String,
        error_type: String,
        message: String,
        /// Accepted but not used: the traceback is on stderr too.
        #[serde(default)]
        #[allow(dead_code)]
        traceback: String,
    },
}

/// One LLM request of an `llm` frame.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LlmRequest {
    prompt: String,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    max_tokens: Option<u64>,
    /// A JSON schema the answer should follow (constrained decoding where the endpoint can).
    #[serde(default)]
    schema: Option<Value>,
}

/// The response schema of a request's `schema`, or why it is refused.
fn response_schema(schema: Option<Value>) -> Result<Option<ResponseSchema>, String> {
    let Some(schema) = schema.filter(|s| !s.is_null()) else {
        return Ok(None);
    };
    if !schema.is_object() {
        return Err("'schema' must be a JSON schema object".into());
    }
    let size = schema.to_string().len();
    if size > MAX_SCHEMA_BYTES {
        return Err(format!(
            "'schema' is {size} bytes of JSON; the limit is {MAX_SCHEMA_BYTES}"
        ));
    }
    Ok(Some(ResponseSchema {
        name: "generator_output".into(),
        schema,
    }))
}

/// Parse one line of the channel.
pub(crate) fn parse_frame(line: &[u8]) -> Result<ChildFrame, String> {
    serde_json::from_slice(line).map_err(|e| format!("malformed frame ({e}): {}", preview(line)))
}

/// What the conversation with the harness came to.
pub(crate) enum Verdict {
    Result(RawResult),
    Fail(Stage, String),
    /// The channel closed without a result (detail appended to the exit message).
    Eof(String),
}

/// The host's side of one run's conversation.
pub(crate) struct Session<'a> {
    pub cfg: &'a SandboxConfig,
    pub llm: Option<Arc<dyn ChatModel>>,
    pub seed: u64,
    pub calls: &'a mut usize,
    /// Whether the program waits on the model (an `llm` frame is unanswered): the run's wall
    /// clock stops meanwhile (see `Sandbox::run`).
    pub waiting: tokio::sync::watch::Sender<bool>,
}

type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = (u64, Vec<Value>)> + Send>>;

impl Session<'_> {
    /// Send `init`, answer LLM requests, and return the first result or error.
    pub async fn talk(
        mut self,
        sock: std::os::unix::net::UnixStream,
        task_context: &str,
        n: usize,
    ) -> Verdict {
        let stream = match sock
            .set_nonblocking(true)
            .and_then(|_| tokio::net::UnixStream::from_std(sock))
        {
            Ok(s) => s,
            Err(e) => return Verdict::Fail(Stage::Spawn, format!("channel: {e}")),
        };
        let (rd, mut wr) = stream.into_split();
        let init = json!({
            "type": "init", "program": PROGRAM_FILE, "task_context": task_context,
            "n": n, "seed": self.seed, "llm": self.llm.is_some(),
        });
        if write_frame(&mut wr, &init).await.is_err() {
            return Verdict::Eof(" (could not send init)".into());
        }
        let mut reader = BufReader::new(rd);
        let mut budget = self.cfg.protocol_cap;
        let mut pending: FuturesUnordered<Pending> = FuturesUnordered::new();
        let mut declared: Option<Vec<String>> = None;
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = {
                let mut limited = (&mut reader).take(budget as u64 + 1);
                let fut = limited.read_until(b'\n', &mut line);
                tokio::pin!(fut);
                loop {
                    tokio::select! {
                        r = &mut fut => break r,
                        Some((id, results)) = pending.next(), if !pending.is_empty() => {
                            let frame = json!({"type": "llm_result", "id": id, "results": results});
                            let _ = write_frame(&mut wr, &frame).await;
                            if pending.is_empty() {
                                self.waiting.send_replace(false);
                            }
                        }
                    }
                }
            };
            match read {
                Ok(0) => return Verdict::Eof(String::new()),
                Ok(k) => {
                    if k > budget {
                        return Verdict::Fail(
                            Stage::Resource,
                            format!(
                                "protocol output exceeded the {} byte cap",
                                self.cfg.protocol_cap
                            ),
                        );
                    }
                    if line.last() != Some(&b'\n') {
                        return Verdict::Eof(" (exited mid-frame)".into());
                    }
                    budget -= k;
                }
                Err(e) => return Verdict::Fail(Stage::Protocol, format!("channel read: {e}")),
            }
            let frame = match parse_frame(&line) {
                Ok(f) => f,
                Err(e) => return Verdict::Fail(Stage::Protocol, e),
            };
            match frame {
                ChildFrame::Axes { axes } => {
                    if declared.is_some() {
                        return Verdict::Fail(
                            Stage::Protocol,
                            "a second 'axes' frame (forged on the channel?)".into(),
                        );
                    }
                    declared = Some(axes);
                }
                ChildFrame::Llm { id, requests } => {
                    pending.push(self.answer(id, requests));
                    self.waiting.send_replace(true);
                }
                ChildFrame::Result {
                    axes,
                    rows,
                    count,
                    truncated,
                } => return check_result(declared.as_deref(), axes, rows, count, truncated, n),
                ChildFrame::Error {
                    stage,
                    error_type,
                    message,
                    traceback: _,
                } => return error_verdict(&stage, &error_type, &message),
            }
        }
    }

    /// Answer one `llm` frame: budget check, then the model (in parallel, order kept).
    fn answer(&mut self, id: u64, reqs: Vec<LlmRequest>) -> Pending {
        let mut jobs = Vec::with_capacity(reqs.len());
        for r in reqs {
            if self.llm.is_none() {
                jobs.push(Err(
                    "no LLM is attached to this run (--llm none)".to_string()
                ));
            } else if *self.calls >= self.cfg.max_llm_calls {
                jobs.push(Err(format!(
                    "LLM call cap of {} per run reached",
                    self.cfg.max_llm_calls
                )));
            } else {
                *self.calls += 1;
                jobs.push(Ok(r));
            }
        }
        let llm = self.llm.clone();
        let seed = self.seed;
        let parallel = self.cfg.llm_parallel;
        Box::pin(async move {
            let results = futures::stream::iter(jobs.into_iter().map(|job| {
                let llm = llm.clone();
                async move {
                    let req = match job {
                        Ok(r) => r,
                        Err(e) => return json!({ "error": e }),
                    };
                    let Some(llm) = llm else {
                        return json!({"error": "no LLM"});
                    };
                    let mut messages = Vec::new();
                    if let Some(sys) = req.system {
                        messages.push(Turn::new(Role::System, sys));
                    }
                    messages.push(Turn::new(Role::User, req.prompt));
                    let response_schema = match response_schema(req.schema) {
                        Ok(s) => s,
                        Err(e) => return json!({ "error": e }),
                    };
                    let mut cr = ChatRequest::new(CallRole::Generator, messages);
                    cr.response_schema = response_schema;
                    cr.temperature = req.temperature.filter(|t| t.is_finite()).map(|t| t as f32);
                    cr.max_tokens = req.max_tokens.map(|t| t.min(u32::MAX as u64) as u32);
                    cr.seed = Some(seed);
                    match llm.chat(&cr).await {
                        Ok(resp) => match resp.schema_mode {
                            Some(mode) => {
                                json!({ "text": resp.message.content, "schema_mode": mode })
                            }
                            None => json!({ "text": resp.message.content }),
                        },
                        Err(e) => json!({ "error": e.to_string() }),
                    }
                }
            }))
            .buffered(parallel)
            .collect::<Vec<_>>()
            .await;
            (id, results)
        })
    }
}

/// Check a `result` frame against the declared axes and the harness's cap.
fn check_result(
    declared: Option<&[String]>,
    axes: Vec<String>,
    rows: Vec<Value>,
    count: u64,
    truncated: bool,
    n: usize,
) -> Verdict {
    let Some(declared) = declared else {
        return Verdict::Fail(
            Stage::Protocol,
            "a 'result' frame before the program's axes were declared (forged on the channel?)"
                .into(),
        );
    };
    if axes != declared {
        return Verdict::Fail(
            Stage::Protocol,
            neutralise(&format!(
                "the result names axes {axes:?}, but the program declared {declared:?} (forged on the channel?)"
            )),
        );
    }
    let cap = 10 * n + 10;
    if rows.len() > cap || (count as usize) < rows.len() || (truncated && rows.len() != cap) {
        return Verdict::Fail(
            Stage::Protocol,
            format!(
                "inconsistent result frame: {} rows, count {count}, truncated {truncated}, cap {cap}",
                rows.len()
            ),
        );
    }
    Verdict::Result(RawResult {
        axes,
        rows,
        count: count as usize,
        truncated,
        stderr_tail: String::new(),
    })
}

/// Map an `error` frame to a failure.
fn error_verdict(stage: &str, error_type: &str, message: &str) -> Verdict {
    let stage = match stage {
        "import" => Stage::Import,
        "contract" => Stage::Contract,
        "resource" => Stage::Resource,
        "generate" => Stage::Generate,
        other => {
            return Verdict::Fail(
                Stage::Protocol,
                neutralise(&format!("an error frame with unknown stage {other:?}")),
            )
        }
    };
    let resource = error_type == "BlockingIOError"
        || message.contains("File too large")
        || message.contains("No space left on device");
    let stage = if stage == Stage::Generate && resource {
        Stage::Resource
    } else {
        stage
    };
    let long = message.chars().nth(MAX_MESSAGE).is_some();
    let mut message: String = message.chars().take(MAX_MESSAGE).collect();
    if long {
        message.push_str("...");
    }
    let error_type: String = error_type.chars().take(200).collect();
    Verdict::Fail(stage, neutralise(&format!("{error_type}: {message}")))
}

/// Write one frame.
pub(crate) async fn write_frame(
    wr: &mut tokio::net::unix::OwnedWriteHalf,
    v: &Value,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    wr.write_all(&bytes).await?;
    wr.flush().await
}

fn preview(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(120)]);
    neutralise(s.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_schema_is_an_object_of_bounded_size() {
        let frame =
            br#"{"type":"llm","id":1,"requests":[{"prompt":"p","schema":{"type":"object"}}]}"#;
        let Ok(ChildFrame::Llm { mut requests, .. }) = parse_frame(frame) else {
            panic!("a schema is a request field");
        };
        let s = response_schema(requests.remove(0).schema).unwrap().unwrap();
        assert_eq!(s.schema, json!({"type": "object"}));
        assert_eq!(response_schema(None).unwrap(), None);
        assert_eq!(response_schema(Some(Value::Null)).unwrap(), None);
        assert!(response_schema(Some(json!(["type"]))).is_err());
        let big = json!({"description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert!(response_schema(Some(big)).unwrap_err().contains("limit"));
    }

    #[test]
    fn frames_are_parsed_strictly() {
        assert!(matches!(
            parse_frame(br#"{"type":"axes","axes":["a"]}"#),
            Ok(ChildFrame::Axes { .. })
        ));
        // Unknown field, unknown type, wrong types: refused.
        assert!(parse_frame(br#"{"type":"axes","axes":["a"],"x":1}"#).is_err());
        assert!(parse_frame(br#"{"type":"shell","cmd":"rm"}"#).is_err());
        assert!(parse_frame(br#"{"type":"axes","axes":[1]}"#).is_err());
        assert!(parse_frame(
            br#"{"type":"result","axes":[],"rows":[],"count":-1,"truncated":false}"#
        )
        .is_err());
        assert!(
            parse_frame(br#"{"type":"llm","id":1,"requests":[{"prompt":"p","shell":1}]}"#).is_err()
        );
    }

    #[test]
    fn results_must_match_the_declared_axes() {
        let a = vec!["terse".to_string()];
        let ok = check_result(Some(&a), a.clone(), vec![json!({})], 1, false, 1);
        assert!(matches!(ok, Verdict::Result(_)));
        let forged = check_result(Some(&a), vec!["evil".into()], vec![json!({})], 1, false, 1);
        assert!(matches!(forged, Verdict::Fail(Stage::Protocol, ref m) if m.contains("declared")));
        let early = check_result(None, a.clone(), vec![], 0, false, 1);
        assert!(matches!(early, Verdict::Fail(Stage::Protocol, _)));
        let lying = check_result(Some(&a), a.clone(), vec![json!({}), json!({})], 1, false, 1);
        assert!(matches!(lying, Verdict::Fail(Stage::Protocol, _)));
    }

    #[test]
    fn error_frames_are_neutralised_and_staged() {
        let v = error_verdict("generate", "ValueError", "bad \u{1b}[2J input");
        match v {
            Verdict::Fail(Stage::Generate, m) => {
                assert!(!m.contains('\u{1b}'), "{m}");
                assert!(m.contains("\\u{1b}[2J"), "{m}");
            }
            _ => panic!("wrong verdict"),
        }
        assert!(matches!(
            error_verdict("root", "X", "y"),
            Verdict::Fail(Stage::Protocol, _)
        ));
    }
}
