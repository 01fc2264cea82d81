//! Files on the Hugging Face Hub, named the way `huggingface_hub`'s file system, pandas, polars
//! and DuckDB name them:
//!
//! ```text
//! hf://datasets/ORG/NAME[@REVISION]/PATH     a dataset file (REVISION: branch, tag or commit; default main)
//! hf://spaces/ORG/NAME[@REVISION]/PATH       a Space file
//! hf://ORG/NAME[@REVISION]/PATH              a model file
//! ```
//!
//! A revision holding `/` is written percent-encoded, as `huggingface_hub` does
//! (`@refs%2Fpr%2F1`). Everywhere a trace path goes (`ppol fingerprint`, `run.human`, Python's
//! `fingerprint(...)`) such a path is fetched into the shared Hub cache and read from there.
//!
//! The environment is the one `huggingface_hub` reads, so both see the same files:
//!
//! * `HF_ENDPOINT` — the Hub (default `https://huggingface.co`);
//! * `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
//!   `~/.cache/huggingface/hub` — the cache, laid out as
//!   `datasets--ORG--NAME/{blobs/ETAG, snapshots/COMMIT/PATH → ../../blobs/ETAG, refs/REVISION}`;
//! * `HF_TOKEN`, else the file `$HF_TOKEN_PATH`, else `$HF_HOME/token` — for gated and private
//!   sets;
//! * `HF_HUB_OFFLINE=1` — no network: the file must already be in the cache.
//!
//! The client is a small one on `reqwest` (already used for LLM endpoints) rather than the
//! `hf-hub` crate: hf-hub 1.0 pulls in some 80 more crates (the Xet storage client, an embedded
//! database, system probes) for what is here one HEAD and one GET, needs a newer Rust than this
//! crate's 1.85, and does not read `HF_HUB_OFFLINE`. The protocol followed is
//! `huggingface_hub.hf_hub_download`'s: `HEAD {endpoint}/datasets/ORG/NAME/resolve/REVISION/PATH`
//! (same-host redirects followed, a CDN redirect not) gives the commit (`X-Repo-Commit`) and the
//! blob id (`X-Linked-Etag` or `ETag`); the blob is fetched with `GET` (resuming a partial
//! `.incomplete` file with a `Range` request), checked against its SHA-256 when the id is one,
//! and linked into the snapshot. Downloads hold the same lock file `huggingface_hub` uses
//! (`.locks/REPO/ETAG.lock`), so a Python process and ppol never write one blob at once. When
//! the Hub cannot be reached, a cached copy is used (as `huggingface_hub` does) with a warning.
//!
//! Failures are [`Error::Io`] naming the `hf://` path and what failed: the file or revision
//! does not exist (404), the set is gated or private (401/403: set `HF_TOKEN`), the file is not
//! in the cache while offline, the Hub cannot be reached.

use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::{Error, Result};

const ACTION: &str = "fetching from the Hugging Face Hub";
const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The kind of Hub repository a path points into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoType {
    /// `hf://ORG/NAME/...`
    Model,
    /// `hf://datasets/ORG/NAME/...`
    Dataset,
    /// `hf://spaces/ORG/NAME/...`
    Space,
}

impl RepoType {
    /// The plural used in cache folder names (`models`, `datasets`, `spaces`).
    pub fn plural(self) -> &'static str {
        match self {
            RepoType::Model => "models",
            RepoType::Dataset => "datasets",
            RepoType::Space => "spaces",
        }
    }

    fn singular(self) -> &'static str {
        match self {
            RepoType::Model => "model",
            RepoType::Dataset => "dataset",
            RepoType::Space => "Space",
        }
    }
}

/// A parsed `hf://` path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubPath {
    /// The path as the user wrote it (used in every message).
    pub original: String,
    /// Repository kind.
    pub repo_type: RepoType,
    /// `ORG/NAME`.
    pub repo_id: String,
    /// Branch, tag or commit (default `main`), percent-decoded.
    pub revision: String,
    /// The file inside the repository (`data/train.jsonl`).
    pub file: String,
}

/// Whether `path` is written as a Hub path (`hf://...`).
pub fn is_hub_path(path: &Path) -> bool {
    path.to_str().is_some_and(|s| s.starts_with("hf://"))
}

impl HubPath {
    /// Parse `hf://[datasets/|spaces/]ORG/NAME[@REVISION]/PATH`. The error names the path and
    /// says what part is missing.
    pub fn parse(s: &str) -> Result<HubPath> {
        let bad = |why: &str| {
            Error::parse(
                s,
                "hub path",
                format!(
                    "{why}; expected hf://datasets/ORG/NAME[@REVISION]/PATH \
                     (or hf://spaces/... or hf://ORG/NAME/... for a model)"
                ),
            )
        };
        let rest = s
            .strip_prefix("hf://")
            .ok_or_else(|| bad("no hf:// prefix"))?;
        let (repo_type, rest) = if let Some(r) = rest.strip_prefix("datasets/") {
            (RepoType::Dataset, r)
        } else if let Some(r) = rest.strip_prefix("spaces/") {
            (RepoType::Space, r)
        } else if let Some(r) = rest.strip_prefix("models/") {
            (RepoType::Model, r)
        } else {
            (RepoType::Model, rest)
        };
        let mut parts = rest.splitn(3, '/');
        let org = parts.next().unwrap_or_default();
        let name_rev = parts.next().unwrap_or_default();
        let file = parts.next().unwrap_or_default();
        if org.is_empty() || name_rev.is_empty() {
            return Err(bad("no repository ORG/NAME"));
        }
        let (name, revision) = match name_rev.split_once('@') {
            Some((n, r)) if !r.is_empty() => (
                n,
                percent_decode(r).ok_or_else(|| bad("bad percent-encoding in the revision"))?,
            ),
            Some(_) => return Err(bad("an empty revision after '@'")),
            None => (name_rev, "main".to_string()),
        };
        if name.is_empty() {
            return Err(bad("no repository name"));
        }
        if file.is_empty() || file.ends_with('/') {
            return Err(bad(&format!(
                "it names the {} {org}/{name}, not a file in it",
                repo_type.singular()
            )));
        }
        let valid = |p: &str| !p.is_empty() && p != "." && p != "..";
        if !file.split('/').all(valid) || !valid(org) || !valid(name) {
            return Err(bad("empty, '.' or '..' path components"));
        }
        Ok(HubPath {
            original: s.to_string(),
            repo_type,
            repo_id: format!("{org}/{name}"),
            revision,
            file: file.to_string(),
        })
    }

    /// The cache folder of the repository (`datasets--ORG--NAME`), as `huggingface_hub` names it.
    pub fn cache_folder(&self) -> String {
        format!(
            "{}--{}",
            self.repo_type.plural(),
            self.repo_id.replace('/', "--")
        )
    }

    /// `{endpoint}/datasets/ORG/NAME/resolve/REVISION/PATH`, every segment percent-encoded.
    pub fn resolve_url(&self, endpoint: &str) -> Result<reqwest::Url> {
        let mut url = reqwest::Url::parse(endpoint.trim_end_matches('/'))
            .map_err(|e| Error::config("HF_ENDPOINT", format!("'{endpoint}' is not a URL: {e}")))?;
        {
            let mut segs = url.path_segments_mut().map_err(|_| {
                Error::config("HF_ENDPOINT", format!("'{endpoint}' cannot be a base URL"))
            })?;
            segs.pop_if_empty();
            match self.repo_type {
                RepoType::Model => {}
                t => {
                    segs.push(t.plural());
                }
            }
            segs.extend(self.repo_id.split('/'));
            segs.push("resolve");
            segs.push(&self.revision);
            segs.extend(self.file.split('/'));
        }
        Ok(url)
    }

    fn err(&self, kind: ErrorKind, message: impl Into<String>) -> Error {
        Error::io(ACTION, &self.original, io::Error::new(kind, message.into()))
    }

    fn what(&self) -> String {
        format!(
            "'{}' in {} {} at revision '{}'",
            self.file,
            self.repo_type.singular(),
            self.repo_id,
            self.revision
        )
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_uppercase().as_str(),
        "1" | "ON" | "YES" | "TRUE"
    )
}

/// Where and how to reach the Hub: read from the environment like `huggingface_hub` does
/// ([`HubEnv::from_env`]), or built by hand (tests, embedding programs).
#[derive(Clone)]
pub struct HubEnv {
    /// Base URL (`HF_ENDPOINT`).
    pub endpoint: String,
    /// The cache directory (`.../huggingface/hub`).
    pub cache_dir: PathBuf,
    /// Access token, when one is configured.
    pub token: Option<String>,
    /// Cache only (`HF_HUB_OFFLINE`).
    pub offline: bool,
}

impl std::fmt::Debug for HubEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubEnv")
            .field("endpoint", &self.endpoint)
            .field("cache_dir", &self.cache_dir)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("offline", &self.offline)
            .finish()
    }
}

impl HubEnv {
    /// The settings `huggingface_hub` would use in this environment (see the module docs).
    pub fn from_env() -> HubEnv {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let hf_home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(std::env::temp_dir)
                .join("huggingface")
        });
        let cache_dir = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| {
                let file = var("HF_TOKEN_PATH")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| hf_home.join("token"));
                std::fs::read_to_string(file)
                    .ok()
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
            });
        HubEnv {
            endpoint: var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            cache_dir,
            token: token.map(|t| t.trim().to_string()),
            offline: var("HF_HUB_OFFLINE").is_some_and(|v| truthy(&v)),
        }
    }
}

/// The local file for `path`: the path itself when it is not a Hub path, else the cached copy
/// of the Hub file (fetched first unless offline; see [`fetch`]).
pub fn local_path(path: &Path) -> Result<PathBuf> {
    if !is_hub_path(path) {
        return Ok(path.to_path_buf());
    }
    let hub = HubPath::parse(path.to_str().unwrap_or_default())?;
    fetch(&hub, &HubEnv::from_env())
}

/// Read a local file or a Hub file (`hf://...`) to a string, like [`crate::io::read_to_string`].
pub fn read_to_string(path: &Path) -> Result<String> {
    crate::io::read_to_string(&local_path(path)?)
}

/// The cached snapshot file of `hub` (`snapshots/COMMIT/PATH`), if the cache holds it.
pub fn cached(hub: &HubPath, env: &HubEnv) -> Option<PathBuf> {
    let repo = env.cache_dir.join(hub.cache_folder());
    let commit = if is_commit_hash(&hub.revision) {
        hub.revision.clone()
    } else {
        std::fs::read_to_string(repo.join("refs").join(&hub.revision))
            .ok()?
            .trim()
            .to_string()
    };
    let snap = repo.join("snapshots").join(commit).join(&hub.file);
    snap.is_file().then_some(snap)
}

/// Make sure `hub` is in the cache and return its snapshot path. Offline, only the cache is
/// looked at; online, the Hub is asked for the file's current commit and blob (so a moved
/// branch is followed) and the blob is downloaded unless the cache already holds it.
pub fn fetch(hub: &HubPath, env: &HubEnv) -> Result<PathBuf> {
    if env.offline {
        return cached(hub, env).ok_or_else(|| {
            hub.err(
                ErrorKind::NotFound,
                format!(
                    "HF_HUB_OFFLINE is set and {} is not in the cache {}; \
                     run once without HF_HUB_OFFLINE to download it",
                    hub.what(),
                    env.cache_dir.display()
                ),
            )
        });
    }
    // A thread of its own with its own runtime: callers may be plain sync code or already
    // inside a tokio runtime (where blocking on another runtime would panic).
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Error::io("starting the async runtime", "<tokio>", e))?;
            rt.block_on(fetch_online(hub, env))
        })
        .join()
        .unwrap_or_else(|_| Err(hub.err(ErrorKind::Other, "the download thread panicked")))
    })
}

/// What a `HEAD .../resolve/...` says about a file.
struct Head {
    commit: String,
    etag: String,
    size: Option<u64>,
}

async fn fetch_online(hub: &HubPath, env: &HubEnv) -> Result<PathBuf> {
    let url = hub.resolve_url(&env.endpoint)?;
    let head = match head(hub, env, &url).await {
        Ok(h) => h,
        Err(Unreachable(e)) => {
            // As huggingface_hub does: a Hub that cannot be reached is not fatal when the
            // cache already holds the file.
            if let Some(p) = cached(hub, env) {
                tracing::warn!(
                    "{}: cannot reach {} ({e}); using the cached copy",
                    hub.original,
                    env.endpoint
                );
                return Ok(p);
            }
            return Err(hub.err(
                ErrorKind::ConnectionRefused,
                format!(
                    "cannot reach the Hub at {} ({e}); the cache {} does not hold {} \
                     (HF_ENDPOINT sets the Hub, HF_HUB_OFFLINE=1 uses the cache only)",
                    env.endpoint,
                    env.cache_dir.display(),
                    hub.what()
                ),
            ));
        }
        Err(Fatal(e)) => return Err(e),
    };
    let repo = env.cache_dir.join(hub.cache_folder());
    let blob = repo.join("blobs").join(&head.etag);
    if !blob.is_file() {
        let lock_dir = env.cache_dir.join(".locks").join(hub.cache_folder());
        mkdirs(&lock_dir)?;
        mkdirs(blob.parent().expect("blob has a parent"))?;
        let _lock = FileLock::acquire(&lock_dir.join(format!("{}.lock", head.etag)))?;
        if !blob.is_file() {
            download(hub, env, &url, &head, &blob).await?;
        }
    }
    if hub.revision != head.commit {
        let r = repo.join("refs").join(&hub.revision);
        mkdirs(r.parent().expect("ref has a parent"))?;
        let current = std::fs::read_to_string(&r).unwrap_or_default();
        if current.trim() != head.commit {
            crate::io::write_atomic(&r, head.commit.as_bytes())?;
        }
    }
    let snap = repo.join("snapshots").join(&head.commit).join(&hub.file);
    link_snapshot(&snap, &blob, hub)?;
    Ok(snap)
}

enum HeadError {
    /// No answer from the Hub (connection refused, timeout, DNS).
    Unreachable(String),
    /// An answer that says the file cannot be had.
    Fatal(Error),
}
use HeadError::{Fatal, Unreachable};

fn client(hub: &HubPath, follow: reqwest::redirect::Policy) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(follow)
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("ppol/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| hub.err(ErrorKind::Other, format!("building the HTTP client: {e}")))
}

fn auth(req: reqwest::RequestBuilder, env: &HubEnv) -> reqwest::RequestBuilder {
    match &env.token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn head(hub: &HubPath, env: &HubEnv, url: &reqwest::Url) -> Result<Head, HeadError> {
    // Relative redirects (a renamed repository) are followed; an absolute one (the CDN holding
    // large files) is not: its headers are what we need. This is huggingface_hub's rule.
    let c = client(hub, reqwest::redirect::Policy::none()).map_err(Fatal)?;
    let mut at = url.clone();
    let mut hops = 0;
    let r = loop {
        let r = auth(c.head(at.clone()), env)
            .header(reqwest::header::ACCEPT_ENCODING, "identity")
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| Unreachable(error_chain(&e)))?;
        let relative = header(&r, "location")
            .filter(|l| r.status().is_redirection() && reqwest::Url::parse(l).is_err());
        match relative {
            Some(loc) if hops < 10 => {
                at = at.join(&loc).map_err(|e| {
                    Fatal(hub.err(
                        ErrorKind::InvalidData,
                        format!("HEAD {at} redirected to '{loc}': {e}"),
                    ))
                })?;
                hops += 1;
            }
            _ => break r,
        }
    };
    let status = r.status();
    let code = header(&r, "x-error-code").unwrap_or_default();
    let server_msg = header(&r, "x-error-message")
        .map(|m| format!(" (the Hub says: {m})"))
        .unwrap_or_default();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        let what = match code.as_str() {
            "GatedRepo" => "is gated".to_string(),
            "RepoNotFound" => "is private or does not exist".to_string(),
            _ => "is gated or private".to_string(),
        };
        let fix = if env.token.is_some() {
            "the token in use (HF_TOKEN, HF_TOKEN_PATH or $HF_HOME/token) has no access to it: \
             accept its conditions on the Hub or use a token that has access"
        } else {
            "set HF_TOKEN to a Hugging Face access token that has access to it"
        };
        return Err(Fatal(hub.err(
            ErrorKind::PermissionDenied,
            format!(
                "{status}: the {} {} {what}{server_msg}; {fix}",
                hub.repo_type.singular(),
                hub.repo_id
            ),
        )));
    }
    if status == reqwest::StatusCode::NOT_FOUND {
        let what = match code.as_str() {
            "RepoNotFound" => format!("there is no {} {}", hub.repo_type.singular(), hub.repo_id),
            "RevisionNotFound" => format!(
                "the {} {} has no revision '{}'",
                hub.repo_type.singular(),
                hub.repo_id,
                hub.revision
            ),
            _ => format!("there is no file {}", hub.what()),
        };
        return Err(Fatal(
            hub.err(ErrorKind::NotFound, format!("{status}: {what}{server_msg}")),
        ));
    }
    if status.is_server_error() {
        return Err(Unreachable(format!("{status}{server_msg}")));
    }
    if !(status.is_success() || status.is_redirection()) {
        return Err(Fatal(hub.err(
            ErrorKind::Other,
            format!("HEAD {url} answered {status}{server_msg}"),
        )));
    }
    let commit = header(&r, "x-repo-commit").ok_or_else(|| {
        Fatal(hub.err(
            ErrorKind::InvalidData,
            format!("HEAD {url} answered {status} without an X-Repo-Commit header: is HF_ENDPOINT a Hugging Face Hub?"),
        ))
    })?;
    let etag = header(&r, "x-linked-etag")
        .or_else(|| header(&r, "etag"))
        .map(|e| {
            e.trim()
                .trim_start_matches("W/")
                .trim_matches('"')
                .to_string()
        })
        .filter(|e| !e.is_empty() && !e.contains(['/', '\\']) && e != "." && e != "..")
        .ok_or_else(|| {
            Fatal(hub.err(
                ErrorKind::InvalidData,
                format!("HEAD {url} answered {status} without a usable ETag"),
            ))
        })?;
    if !is_commit_hash(&commit) {
        return Err(Fatal(hub.err(
            ErrorKind::InvalidData,
            format!("HEAD {url}: X-Repo-Commit '{commit}' is not a commit hash"),
        )));
    }
    let size = header(&r, "x-linked-size")
        .or_else(|| {
            status
                .is_success()
                .then(|| header(&r, "content-length"))
                .flatten()
        })
        .and_then(|s| s.trim().parse().ok());
    Ok(Head { commit, etag, size })
}

async fn download(
    hub: &HubPath,
    env: &HubEnv,
    url: &reqwest::Url,
    head: &Head,
    blob: &Path,
) -> Result<()> {
    use tokio::io::AsyncWriteExt;
    let partial = PathBuf::from(format!("{}.incomplete", blob.display()));
    let mut have = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
    if head.size.is_some_and(|s| have > s) {
        have = 0;
    }
    let c = client(hub, reqwest::redirect::Policy::limited(10))?;
    let mut req = auth(c.get(url.clone()), env)
        .header(reqwest::header::ACCEPT_ENCODING, "identity")
        .timeout(Duration::from_secs(3600));
    if have > 0 {
        req = req.header(reqwest::header::RANGE, format!("bytes={have}-"));
    }
    let mut r = req.send().await.map_err(|e| {
        hub.err(
            ErrorKind::ConnectionAborted,
            format!("downloading {url}: {}", error_chain(&e)),
        )
    })?;
    let status = r.status();
    let append = match status {
        reqwest::StatusCode::PARTIAL_CONTENT if have > 0 => true,
        s if s.is_success() => false,
        reqwest::StatusCode::RANGE_NOT_SATISFIABLE => {
            let _ = std::fs::remove_file(&partial);
            return Err(hub.err(
                ErrorKind::InvalidData,
                "the Hub refused to resume a partial download; it was removed, try again",
            ));
        }
        s => {
            return Err(hub.err(
                ErrorKind::Other,
                format!("GET {url} answered {s} after HEAD succeeded"),
            ))
        }
    };
    tracing::info!(
        "{}: downloading {} bytes into {}",
        hub.original,
        head.size.map_or_else(|| "?".to_string(), |s| s.to_string()),
        blob.display()
    );
    let mut f = tokio::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(&partial)
        .await
        .map_err(|e| Error::io("writing", &partial, e))?;
    loop {
        match r.chunk().await {
            Ok(Some(bytes)) => f
                .write_all(&bytes)
                .await
                .map_err(|e| Error::io("writing", &partial, e))?,
            Ok(None) => break,
            Err(e) => {
                // What arrived stays in the .incomplete file: the next attempt resumes it.
                let _ = f.flush().await;
                return Err(hub.err(
                    ErrorKind::ConnectionAborted,
                    format!(
                        "the download broke off ({}); run again to resume it",
                        error_chain(&e)
                    ),
                ));
            }
        }
    }
    f.flush()
        .await
        .map_err(|e| Error::io("writing", &partial, e))?;
    f.sync_all()
        .await
        .map_err(|e| Error::io("writing", &partial, e))?;
    drop(f);
    let got = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
    if let Some(size) = head.size {
        if got != size {
            if got > size {
                let _ = std::fs::remove_file(&partial);
            }
            return Err(hub.err(
                ErrorKind::InvalidData,
                format!("downloaded {got} bytes, the Hub announced {size}; run again to resume"),
            ));
        }
    }
    // A 64-hex blob id is the SHA-256 of a large (LFS / Xet) file's content: check it.
    if head.etag.len() == 64 && head.etag.bytes().all(|b| b.is_ascii_hexdigit()) {
        let digest = sha256_file(&partial)?;
        if !digest.eq_ignore_ascii_case(&head.etag) {
            let _ = std::fs::remove_file(&partial);
            return Err(hub.err(
                ErrorKind::InvalidData,
                format!(
                    "the download's SHA-256 is {digest}, the Hub announced {}; it was discarded",
                    head.etag
                ),
            ));
        }
    }
    std::fs::rename(&partial, blob).map_err(|e| Error::io("renaming download to", blob, e))
}

fn sha256_file(path: &Path) -> Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io("reading", path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Error::io("reading", path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(crate::io::hex(&h.finalize()))
}

/// `snapshots/COMMIT/PATH` → a relative link to `blobs/ETAG` (a copy where links fail).
fn link_snapshot(snap: &Path, blob: &Path, hub: &HubPath) -> Result<()> {
    let dir = snap.parent().expect("snapshot has a parent");
    mkdirs(dir)?;
    let depth = hub.file.split('/').count() + 1; // PATH's folders + COMMIT + snapshots
    let target = PathBuf::from("../".repeat(depth))
        .join("blobs")
        .join(blob.file_name().expect("blob has a name"));
    if std::fs::read_link(snap).ok().as_deref() == Some(target.as_path()) && snap.is_file() {
        return Ok(());
    }
    let _ = std::fs::remove_file(snap);
    #[cfg(unix)]
    let linked = std::os::unix::fs::symlink(&target, snap);
    #[cfg(not(unix))]
    let linked: io::Result<()> = Err(io::Error::new(ErrorKind::Unsupported, "no symlinks"));
    if linked.is_err() {
        std::fs::copy(blob, snap).map_err(|e| Error::io("copying into the Hub cache", snap, e))?;
    }
    Ok(())
}

fn mkdirs(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = c.source();
    }
    s
}

/// An exclusive `flock` on the lock file `huggingface_hub` uses for the same blob (its
/// `filelock` takes `fcntl.flock` on Unix), released when dropped.
struct FileLock {
    _file: std::fs::File,
}

impl FileLock {
    fn acquire(path: &Path) -> Result<FileLock> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::io("opening lock file", path, e))?;
        #[cfg(unix)]
        rustix::io::retry_on_intr(|| {
            rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        })
        .map_err(|e| Error::io("locking", path, e.into()))?;
        Ok(FileLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_datasets_revisions_models_and_spaces() {
        let p = HubPath::parse("hf://datasets/cmu-lti/tau-usi/data/tau_bench_tasks_unified.json")
            .unwrap();
        assert_eq!(p.repo_type, RepoType::Dataset);
        assert_eq!(p.repo_id, "cmu-lti/tau-usi");
        assert_eq!(p.revision, "main");
        assert_eq!(p.file, "data/tau_bench_tasks_unified.json");
        assert_eq!(p.cache_folder(), "datasets--cmu-lti--tau-usi");
        assert_eq!(
            p.resolve_url("http://127.0.0.1:9/").unwrap().as_str(),
            "http://127.0.0.1:9/datasets/cmu-lti/tau-usi/resolve/main/data/tau_bench_tasks_unified.json"
        );
        let p = HubPath::parse("hf://datasets/o/n@refs%2Fpr%2F3/a b.jsonl").unwrap();
        assert_eq!(p.revision, "refs/pr/3");
        assert_eq!(
            p.resolve_url("https://hub.example/mirror")
                .unwrap()
                .as_str(),
            "https://hub.example/mirror/datasets/o/n/resolve/refs%2Fpr%2F3/a%20b.jsonl"
        );
        let m = HubPath::parse("hf://org/model@v1/config.json").unwrap();
        assert_eq!((m.repo_type, m.revision.as_str()), (RepoType::Model, "v1"));
        assert_eq!(
            m.resolve_url("http://h").unwrap().as_str(),
            "http://h/org/model/resolve/v1/config.json"
        );
        assert_eq!(
            HubPath::parse("hf://spaces/o/s/app.py")
                .unwrap()
                .cache_folder(),
            "spaces--o--s"
        );
    }

    #[test]
    fn rejects_paths_that_name_no_file() {
        for (bad, why) in [
            ("hf://datasets/o/n", "not a file"),
            ("hf://datasets/o/n/", "not a file"),
            ("hf://datasets/o", "no repository"),
            ("hf://datasets/o/n@/f.json", "empty revision"),
            ("hf://datasets/o/n/../f.json", "'..'"),
            ("hf://datasets/o/n@%zz/f", "percent"),
        ] {
            let e = HubPath::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains(why), "{bad}: {e}");
        }
        assert!(!is_hub_path(Path::new("data/hf.json")));
        assert!(is_hub_path(Path::new("hf://datasets/o/n/f")));
    }

    #[test]
    fn offline_reads_refs_and_snapshots_only() {
        let dir = tempfile::tempdir().unwrap();
        let env = HubEnv {
            endpoint: "http://127.0.0.1:9".into(),
            cache_dir: dir.path().to_path_buf(),
            token: None,
            offline: true,
        };
        let p = HubPath::parse("hf://datasets/o/n/d/x.jsonl").unwrap();
        let e = fetch(&p, &env).unwrap_err().to_string();
        assert!(
            e.contains("hf://datasets/o/n/d/x.jsonl") && e.contains("HF_HUB_OFFLINE"),
            "{e}"
        );
        let commit = "a".repeat(40);
        let repo = dir.path().join("datasets--o--n");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), &commit).unwrap();
        let snap = repo.join("snapshots").join(&commit).join("d/x.jsonl");
        std::fs::create_dir_all(snap.parent().unwrap()).unwrap();
        std::fs::write(&snap, "{}\n").unwrap();
        assert_eq!(fetch(&p, &env).unwrap(), snap);
    }
}
