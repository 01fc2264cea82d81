//! `hf://` paths against a stand-in Hub on 127.0.0.1 that plays the Hub's `resolve` routes
//! (HEAD and ranged GET with `ETag` / `X-Repo-Commit`, a CDN redirect with `X-Linked-Etag` for
//! large files, 401 for a gated file without a token, 404 with `X-Error-Code`). Never the
//! network.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::util::{ppol, root};

const TOKEN: &str = "hf_test_token";
const MAIN: &str = "1111111111111111111111111111111111111111";
const V1: &str = "2222222222222222222222222222222222222222";

/// One request the stand-in saw.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: HashMap<String, String>,
}

#[derive(Clone)]
struct HubFile {
    body: Vec<u8>,
    gated: bool,
    /// Served like an LFS / Xet file: HEAD answers 302 to a CDN path with X-Linked-Etag.
    large: bool,
    /// The CDN serves other bytes than announced (for the checksum test).
    corrupt: bool,
}

/// The stand-in Hub: dataset `org/traces` with revisions `main` and `v1`.
struct StandIn {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl StandIn {
    fn start(files: Vec<(&str, &str, HubFile)>) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let files: Arc<HashMap<(String, String), HubFile>> = Arc::new(
            files
                .into_iter()
                .map(|(rev, path, f)| ((rev.to_string(), path.to_string()), f))
                .collect(),
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, st2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (files, seen) = (files.clone(), s2.clone());
                std::thread::spawn(move || serve(conn, &files, &seen));
            }
        });
        StandIn { port, seen, stop }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn sha256(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// A git-style blob id for small files (40 hex, not a SHA-256: not checked by the client).
fn git_etag(b: &[u8]) -> String {
    sha256(b)[..40].to_string()
}

fn decode(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn respond(
    conn: &mut TcpStream,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
    head: bool,
) {
    let mut out = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let _ = conn.write_all(out.as_bytes());
    if !head {
        let _ = conn.write_all(body);
    }
    let _ = conn.flush();
}

/// Serve `body` (or its tail from a `Range: bytes=N-` request).
fn send_body(conn: &mut TcpStream, req: &Seen, extra: Vec<(&str, String)>, body: &[u8]) {
    let head = req.method == "HEAD";
    if let Some(from) = req
        .headers
        .get("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok())
    {
        let mut h = extra;
        h.push((
            "Content-Range",
            format!("bytes {from}-{}/{}", body.len() - 1, body.len()),
        ));
        respond(conn, "206 Partial Content", &h, &body[from..], head);
    } else {
        respond(conn, "200 OK", &extra, body, head);
    }
}

fn serve(mut conn: TcpStream, files: &HashMap<(String, String), HubFile>, seen: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut it = line.split_whitespace();
    let method = it.next().unwrap_or_default().to_string();
    let path = it.next().unwrap_or_default().to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let req = Seen {
        method,
        path,
        headers,
    };
    seen.lock().unwrap().push(req.clone());
    let head = req.method == "HEAD";
    // The CDN route of large files: /cdn/<sha256>
    if let Some(sha) = req.path.strip_prefix("/cdn/") {
        let f = files.values().find(|f| sha256(&f.body) == sha).cloned();
        match f {
            Some(f) => {
                let body = if f.corrupt {
                    f.body.iter().map(|b| b ^ 1).collect()
                } else {
                    f.body.clone()
                };
                send_body(&mut conn, &req, vec![], &body)
            }
            None => respond(&mut conn, "404 Not Found", &[], b"", head),
        }
        return;
    }
    let Some(rest) = req.path.strip_prefix("/datasets/") else {
        return respond(&mut conn, "404 Not Found", &[], b"", head);
    };
    let parts: Vec<&str> = rest.splitn(5, '/').collect();
    if parts.len() < 5 || parts[2] != "resolve" {
        return respond(&mut conn, "404 Not Found", &[], b"", head);
    }
    if format!("{}/{}", parts[0], parts[1]) == "org/old-name" {
        // a renamed repository: the Hub answers with a relative redirect
        let h = [(
            "Location",
            format!("/datasets/org/traces/resolve/{}/{}", parts[3], parts[4]),
        )];
        return respond(&mut conn, "307 Temporary Redirect", &h, b"", head);
    }
    if format!("{}/{}", parts[0], parts[1]) != "org/traces" {
        let h = [("X-Error-Code", "RepoNotFound".to_string())];
        return respond(&mut conn, "404 Not Found", &h, b"", head);
    }
    let rev = decode(parts[3]);
    let file = decode(parts[4]);
    let commit = match rev.as_str() {
        "main" | MAIN => MAIN,
        "v1" | V1 => V1,
        _ => {
            let h = [("X-Error-Code", "RevisionNotFound".to_string())];
            return respond(&mut conn, "404 Not Found", &h, b"", head);
        }
    };
    let rev_name = if commit == MAIN { "main" } else { "v1" };
    let Some(f) = files.get(&(rev_name.to_string(), file.clone())) else {
        let h = [
            ("X-Error-Code", "EntryNotFound".to_string()),
            ("X-Repo-Commit", commit.to_string()),
        ];
        return respond(&mut conn, "404 Not Found", &h, b"", head);
    };
    if f.gated && req.headers.get("authorization") != Some(&format!("Bearer {TOKEN}")) {
        let h = [
            ("X-Error-Code", "GatedRepo".to_string()),
            (
                "X-Error-Message",
                "Access to dataset org/traces is restricted.".to_string(),
            ),
        ];
        return respond(&mut conn, "401 Unauthorized", &h, b"", head);
    }
    if f.large {
        let sha = sha256(&f.body);
        let h = [
            ("X-Repo-Commit", commit.to_string()),
            ("X-Linked-Etag", format!("\"{sha}\"")),
            ("X-Linked-Size", f.body.len().to_string()),
            ("ETag", "\"not-the-blob-id\"".to_string()),
            // absolute, like the Hub's CDN links (a relative one would be a renamed repo)
            (
                "Location",
                format!(
                    "http://{}/cdn/{sha}",
                    req.headers.get("host").cloned().unwrap_or_default()
                ),
            ),
        ];
        return respond(&mut conn, "302 Found", &h, b"", head);
    }
    let extra = vec![
        ("X-Repo-Commit", commit.to_string()),
        ("ETag", format!("\"{}\"", git_etag(&f.body))),
    ];
    send_body(&mut conn, &req, extra, &f.body);
}

fn plain(body: &[u8]) -> HubFile {
    HubFile {
        body: body.to_vec(),
        gated: false,
        large: false,
        corrupt: false,
    }
}

fn human() -> Vec<u8> {
    std::fs::read(root().join("fitness/demo/human.jsonl")).unwrap()
}

/// `ppol ARGS` with a clean Hub environment: `HF_HOME` = `home`, `HF_ENDPOINT` = `endpoint`,
/// plus `extra` variables.
fn ppol_hub(
    args: &[&str],
    home: &Path,
    endpoint: &str,
    extra: &[(&str, &str)],
) -> (i32, String, String) {
    let mut c = ppol();
    for k in [
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_HUB_OFFLINE",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "XDG_CACHE_HOME",
    ] {
        c.env_remove(k);
    }
    c.env("HF_HOME", home).env("HF_ENDPOINT", endpoint);
    for (k, v) in extra {
        c.env(k, v);
    }
    let out = c.args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn dead_endpoint() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

fn repo_dir(home: &Path) -> PathBuf {
    home.join("hub").join("datasets--org--traces")
}

#[test]
fn hub_fingerprint_equals_local_file_and_rereads_from_cache_offline() {
    let hub = StandIn::start(vec![("main", "data/human.jsonl", plain(&human()))]);
    let home = tempfile::tempdir().unwrap();
    let local = root().join("fitness/demo/human.jsonl");
    let (code, want, err) = ppol_hub(
        &["fingerprint", local.to_str().unwrap()],
        home.path(),
        &hub.endpoint(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let path = "hf://datasets/org/traces/data/human.jsonl";
    let (code, got, err) = ppol_hub(&["fingerprint", path], home.path(), &hub.endpoint(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(got, want);
    assert_eq!(got.lines().count(), 25);

    // The cache is laid out as huggingface_hub lays it out.
    let repo = repo_dir(home.path());
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        MAIN
    );
    let etag = git_etag(&human());
    assert_eq!(
        std::fs::read(repo.join("blobs").join(&etag)).unwrap(),
        human()
    );
    let snap = repo.join("snapshots").join(MAIN).join("data/human.jsonl");
    assert_eq!(
        std::fs::read_link(&snap).unwrap(),
        PathBuf::from("../../../blobs").join(&etag)
    );
    let seen = hub.seen();
    assert_eq!(seen.iter().filter(|r| r.method == "HEAD").count(), 1);
    assert_eq!(seen.iter().filter(|r| r.method == "GET").count(), 1);
    assert_eq!(
        seen[0].path,
        "/datasets/org/traces/resolve/main/data/human.jsonl"
    );

    // A second read online finds the blob cached: HEAD only.
    let (code, again, err) = ppol_hub(&["fingerprint", path], home.path(), &hub.endpoint(), &[]);
    assert_eq!((code, again.as_str()), (0, want.as_str()), "{err}");
    assert_eq!(hub.seen().iter().filter(|r| r.method == "GET").count(), 1);

    // Offline, with no Hub at all: from the cache, no request made.
    drop(hub);
    let dead = dead_endpoint();
    let (code, offline, err) = ppol_hub(
        &["fingerprint", path],
        home.path(),
        &dead,
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(offline, want);
    // Online but unreachable: the cached copy is used, with a warning.
    let (code, fallback, err) = ppol_hub(&["fingerprint", path], home.path(), &dead, &[]);
    assert_eq!((code, fallback.as_str()), (0, want.as_str()), "{err}");
    assert!(err.contains("using the cached copy"), "{err}");
}

#[test]
fn hub_offline_without_the_file_cached_names_it() {
    let home = tempfile::tempdir().unwrap();
    let path = "hf://datasets/org/traces/data/human.jsonl";
    let (code, _, err) = ppol_hub(
        &["fingerprint", path],
        home.path(),
        &dead_endpoint(),
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains(path) && err.contains("HF_HUB_OFFLINE") && err.contains("not in the cache"),
        "{err}"
    );
    // Online with no Hub reachable and nothing cached: says so, names the endpoint.
    let dead = dead_endpoint();
    let (code, _, err) = ppol_hub(&["fingerprint", path], home.path(), &dead, &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains(path) && err.contains("cannot reach the Hub") && err.contains(&dead),
        "{err}"
    );
}

#[test]
fn hub_gated_file_needs_hf_token() {
    let mut f = plain(&human());
    f.gated = true;
    let hub = StandIn::start(vec![("main", "gated/human.jsonl", f)]);
    let home = tempfile::tempdir().unwrap();
    let path = "hf://datasets/org/traces/gated/human.jsonl";
    let (code, out, err) = ppol_hub(
        &["traces", "stats", path],
        home.path(),
        &hub.endpoint(),
        &[],
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        err.contains(path)
            && err.contains("401")
            && err.contains("gated")
            && err.contains("set HF_TOKEN"),
        "{err}"
    );
    // A wrong token: the message says the token has no access.
    let (code, _, err) = ppol_hub(
        &["traces", "stats", path],
        home.path(),
        &hub.endpoint(),
        &[("HF_TOKEN", "hf_wrong")],
    );
    assert_eq!(code, 2);
    assert!(err.contains("has no access"), "{err}");
    // The token from HF_TOKEN, then from $HF_HOME/token as huggingface_hub stores it.
    let (code, out, err) = ppol_hub(
        &["traces", "stats", path],
        home.path(),
        &hub.endpoint(),
        &[("HF_TOKEN", TOKEN)],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("25"), "{out}");
    let home2 = tempfile::tempdir().unwrap();
    std::fs::write(home2.path().join("token"), format!("{TOKEN}\n")).unwrap();
    let (code, _, err) = ppol_hub(
        &["traces", "stats", path],
        home2.path(),
        &hub.endpoint(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let authed = hub
        .seen()
        .iter()
        .filter(|r| {
            r.headers.get("authorization").map(String::as_str) == Some("Bearer hf_test_token")
        })
        .count();
    assert_eq!(authed, 4, "HEAD + GET for each of the two authorised reads");
}

#[test]
fn hub_missing_file_revision_and_repo_are_named() {
    let hub = StandIn::start(vec![("main", "data/human.jsonl", plain(&human()))]);
    let home = tempfile::tempdir().unwrap();
    for (path, want) in [
        (
            "hf://datasets/org/traces/data/nope.jsonl",
            "there is no file 'data/nope.jsonl' in dataset org/traces at revision 'main'",
        ),
        (
            "hf://datasets/org/traces@v9/data/human.jsonl",
            "has no revision 'v9'",
        ),
        (
            "hf://datasets/org/other/data/human.jsonl",
            "there is no dataset org/other",
        ),
        ("hf://datasets/org/traces", "not a file"),
    ] {
        let (code, _, err) = ppol_hub(&["fingerprint", path], home.path(), &hub.endpoint(), &[]);
        assert_eq!(code, 2, "{path}");
        assert!(err.contains(path) && err.contains(want), "{path}: {err}");
    }
}

#[test]
fn hub_revision_and_large_file_behind_a_cdn_redirect() {
    let body = human();
    let mut f = plain(&body);
    f.large = true;
    let hub = StandIn::start(vec![("v1", "data/big.jsonl", f)]);
    let home = tempfile::tempdir().unwrap();
    let path = "hf://datasets/org/traces@v1/data/big.jsonl";
    let (code, out, err) = ppol_hub(&["fingerprint", path], home.path(), &hub.endpoint(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 25);
    let repo = repo_dir(home.path());
    assert_eq!(std::fs::read_to_string(repo.join("refs/v1")).unwrap(), V1);
    let sha = sha256(&body);
    assert_eq!(std::fs::read(repo.join("blobs").join(&sha)).unwrap(), body);
    assert!(repo
        .join("snapshots")
        .join(V1)
        .join("data/big.jsonl")
        .is_file());
    let seen = hub.seen();
    // HEAD did not follow the CDN redirect; GET did.
    assert_eq!(
        seen.iter()
            .map(|r| (r.method.as_str(), r.path.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("HEAD", "/datasets/org/traces/resolve/v1/data/big.jsonl"),
            ("GET", "/datasets/org/traces/resolve/v1/data/big.jsonl"),
            ("GET", &*format!("/cdn/{sha}")),
        ]
    );
    // By commit hash, offline: the snapshot is found without refs.
    let by_commit = format!("hf://datasets/org/traces@{V1}/data/big.jsonl");
    let (code, again, err) = ppol_hub(
        &["fingerprint", &by_commit],
        home.path(),
        &dead_endpoint(),
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert_eq!((code, again.as_str()), (0, out.as_str()), "{err}");
}

#[test]
fn hub_resumes_a_partial_download_with_a_range_request() {
    let body = human();
    let mut f = plain(&body);
    f.large = true;
    let hub = StandIn::start(vec![("main", "data/big.jsonl", f)]);
    let home = tempfile::tempdir().unwrap();
    let sha = sha256(&body);
    let blobs = repo_dir(home.path()).join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::write(blobs.join(format!("{sha}.incomplete")), &body[..1000]).unwrap();
    let (code, _, err) = ppol_hub(
        &["fingerprint", "hf://datasets/org/traces/data/big.jsonl"],
        home.path(),
        &hub.endpoint(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(blobs.join(&sha)).unwrap(), body);
    assert!(!blobs.join(format!("{sha}.incomplete")).exists());
    let ranged: Vec<_> = hub
        .seen()
        .into_iter()
        .filter_map(|r| r.headers.get("range").cloned())
        .collect();
    assert_eq!(
        ranged,
        vec!["bytes=1000-".to_string(); 2],
        "resolve and CDN both asked from byte 1000"
    );
}

#[test]
fn hub_download_with_a_wrong_checksum_is_discarded() {
    let mut f = plain(&human());
    f.large = true;
    f.corrupt = true;
    let hub = StandIn::start(vec![("main", "data/big.jsonl", f)]);
    let home = tempfile::tempdir().unwrap();
    let (code, _, err) = ppol_hub(
        &["fingerprint", "hf://datasets/org/traces/data/big.jsonl"],
        home.path(),
        &hub.endpoint(),
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("SHA-256") && err.contains("discarded"),
        "{err}"
    );
    let blobs = repo_dir(home.path()).join("blobs");
    assert_eq!(
        std::fs::read_dir(&blobs).unwrap().count(),
        0,
        "nothing corrupt is kept"
    );
}

#[test]
fn hub_paths_pass_the_run_configuration_check() {
    use ppol::evolve::config::RunConfig;
    let mut cfg = RunConfig::quick();
    cfg.run.human = vec![PathBuf::from(
        "hf://datasets/cmu-lti/tau-usi/data/tau_bench_tasks_unified.json",
    )];
    cfg.check_inputs().unwrap();
    cfg.run.human = vec![PathBuf::from("hf://datasets/cmu-lti")];
    let e = cfg.check_inputs().unwrap_err().to_string();
    assert!(
        e.contains("run.human[0]") && e.contains("no repository"),
        "{e}"
    );
}

#[test]
fn hub_path_as_run_human_in_a_toml_file_is_loaded() {
    // `ppol evolve --config` with run.human on the Hub fails at load time naming the Hub
    // path (a missing file), i.e. the path went through the Hub client, not the file system.
    let hub = StandIn::start(vec![]);
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("run.toml");
    let path = "hf://datasets/org/traces/data/missing.jsonl";
    std::fs::write(
        &cfg,
        format!(
            "[run]\nhuman = [\"{path}\"]\nout = \"{}\"\n",
            home.path().join("run").display()
        ),
    )
    .unwrap();
    let (code, _, err) = ppol_hub(
        &[
            "evolve",
            "--config",
            cfg.to_str().unwrap(),
            "--iterations",
            "1",
            "--quiet",
        ],
        home.path(),
        &hub.endpoint(),
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(path) && err.contains("404"), "{err}");
    assert!(hub
        .seen()
        .iter()
        .any(|r| r.path == "/datasets/org/traces/resolve/main/data/missing.jsonl"));
}

#[test]
fn hub_follows_a_renamed_repository_and_caches_under_the_name_used() {
    let hub = StandIn::start(vec![("main", "data/human.jsonl", plain(&human()))]);
    let home = tempfile::tempdir().unwrap();
    let path = "hf://datasets/org/old-name/data/human.jsonl";
    let (code, out, err) = ppol_hub(&["fingerprint", path], home.path(), &hub.endpoint(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 25);
    let heads: Vec<String> = hub
        .seen()
        .into_iter()
        .filter(|r| r.method == "HEAD")
        .map(|r| r.path)
        .collect();
    assert_eq!(
        heads,
        [
            "/datasets/org/old-name/resolve/main/data/human.jsonl",
            "/datasets/org/traces/resolve/main/data/human.jsonl"
        ]
    );
    let repo = home.path().join("hub/datasets--org--old-name");
    assert!(repo
        .join("snapshots")
        .join(MAIN)
        .join("data/human.jsonl")
        .is_file());
}
