//! S3-compatible object storage (AWS S3, MinIO, Ceph, R2, ...) as a [`BlobStore`]: see
//! [`S3Store`].

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::{HttpError, HttpErrorKind};
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};
use tokio::runtime::Runtime;

use super::blob::{BlobInfo, BlobStore, RangeRead};
use super::ReadDone;
use crate::error::{Cause, Error, Result};

/// Where and how to reach an S3-compatible bucket. Build one with
/// [`S3Config::from_url`], which fills in the usual AWS environment variables, then
/// adjust the fields.
#[derive(Clone)]
pub struct S3Config {
    /// The data's location: `s3://bucket` or `s3://bucket/prefix`. Keys are listed and
    /// read relative to the prefix.
    pub url: String,
    /// The server to talk to, e.g. `http://127.0.0.1:9000` for a local MinIO. `None`
    /// talks to AWS S3 itself, at the region's endpoint. With an endpoint, requests are
    /// path-style (`endpoint/bucket/key`), which every S3-compatible server accepts.
    /// From `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT`).
    pub endpoint: Option<String>,
    /// The region requests are signed for. Most S3-compatible servers accept any value.
    /// From `AWS_REGION`, else `AWS_DEFAULT_REGION`, else `us-east-1`.
    pub region: String,
    /// Whether a plain-HTTP endpoint is allowed; otherwise only HTTPS is. From the
    /// endpoint (`http://...`), or `AWS_ALLOW_HTTP=true`.
    pub allow_http: bool,
    /// The access key id. With the secret, requests are signed with these static
    /// credentials; without either, the AWS credential chain is used (web identity,
    /// ECS/EKS container credentials, then instance metadata), configured from the
    /// environment as the AWS SDKs do. From `AWS_ACCESS_KEY_ID`.
    pub access_key_id: Option<String>,
    /// The secret access key that goes with [`access_key_id`](Self::access_key_id).
    /// From `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// A session token, for temporary static credentials. From `AWS_SESSION_TOKEN`.
    pub session_token: Option<String>,
    /// Without static keys, what configures the AWS credential chain: the chain's
    /// variables that were set (web identity token file, role, container credentials).
    pub credential_chain: Vec<(String, String)>,
    /// The limit on one HTTP request, from connecting to the last byte of the body. A
    /// request that runs over is retried (within the retry window). Default 30 s.
    pub request_timeout: Duration,
    /// The most times one request is retried after a transient failure. Default 50:
    /// enough that [`retry_window`](Self::retry_window) is normally what ends a run of
    /// retries.
    pub max_retries: usize,
    /// How long after a request's first attempt retries may still start: a server
    /// that is back within this window costs no sample. Default 30 s. A request gives
    /// up after at most about this long plus one [`request_timeout`](Self::request_timeout).
    pub retry_window: Duration,
}

/// The first and the longest pause between retries.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(2));

/// Requests one loader thread keeps in flight ([`BlobStore::reads_at_once`]): enough that
/// a few threads cover what Little's law asks of a store 20–50 ms away, few enough that a
/// thread's share of the reads still spreads over the bound's small steps.
const READS_AT_ONCE: usize = 16;

/// Environment variables that configure the AWS credential chain, used when no static
/// keys are given: the last of [`super::S3_ENVIRONMENT`], after the endpoint, region and
/// static keys.
const CREDENTIAL_CHAIN_VARS: &[&str] = super::S3_ENVIRONMENT.split_at(8).1;

impl S3Config {
    /// The configuration for `url` (`s3://bucket/prefix`), with the endpoint, region and
    /// credentials taken from the usual AWS environment variables (see each field) and
    /// default timeouts and retries.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `url` is not an `s3://bucket[/prefix]` URL.
    pub fn from_url(url: &str) -> Result<S3Config> {
        S3Config::from_url_in(url, |name| std::env::var(name).ok())
    }

    /// As [`S3Config::from_url`], with the variables' values given by `var` instead of
    /// this process's environment (another job's, say).
    ///
    /// # Errors
    ///
    /// As for [`S3Config::from_url`].
    pub fn from_url_in(url: &str, var: impl Fn(&str) -> Option<String>) -> Result<S3Config> {
        parse_url(url)?;
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        let endpoint = var("AWS_ENDPOINT_URL").or_else(|| var("AWS_ENDPOINT"));
        let allow_http = endpoint
            .as_deref()
            .is_some_and(|e| e.to_ascii_lowercase().starts_with("http://"))
            || var("AWS_ALLOW_HTTP").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Ok(S3Config {
            url: url.to_string(),
            endpoint,
            region: var("AWS_REGION")
                .or_else(|| var("AWS_DEFAULT_REGION"))
                .unwrap_or_else(|| "us-east-1".to_string()),
            allow_http,
            access_key_id: var("AWS_ACCESS_KEY_ID"),
            secret_access_key: var("AWS_SECRET_ACCESS_KEY"),
            session_token: var("AWS_SESSION_TOKEN"),
            credential_chain: CREDENTIAL_CHAIN_VARS
                .iter()
                .filter_map(|&name| Some((name.to_string(), var(name)?)))
                .collect(),
            request_timeout: Duration::from_secs(30),
            max_retries: 50,
            retry_window: Duration::from_secs(30),
        })
    }
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |s: &Option<String>| s.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3Config")
            .field("url", &self.url)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &redacted(&self.secret_access_key))
            .field("session_token", &redacted(&self.session_token))
            .field("credential_chain", &self.credential_chain)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_window", &self.retry_window)
            .finish()
    }
}

/// Splits `s3://bucket/prefix` into the bucket and the prefix (without slashes at
/// either end; empty for a whole bucket).
fn parse_url(url: &str) -> Result<(String, String)> {
    let bad = |why: &str| {
        Error::Config(format!(
            "`{url}` is not an S3 location ({why}); write it as s3://bucket or s3://bucket/prefix"
        ))
    };
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| bad("it does not start with s3://"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(bad("no bucket name"));
    }
    let prefix = prefix.trim_matches('/');
    Path::parse(prefix).map_err(|e| bad(&e.to_string()))?;
    Ok((bucket.to_string(), prefix.to_string()))
}

/// The objects under a prefix of an S3-compatible bucket, as blobs keyed by their names
/// relative to the prefix.
///
/// It wraps an `object_store` S3 client in a blocking interface: loader threads
/// are plain OS threads, so every call enters a small tokio runtime owned by the store
/// with [`Runtime::block_on`]. A multi-thread runtime allows `block_on` from any number
/// of threads at once (the future runs on the calling thread; the runtime's worker
/// threads drive the sockets and timers), so the store is shared by all loader threads
/// without a lock. It must not be called from inside an async runtime: `block_on` panics
/// there. [`BlobStore::read_each_range`] runs its reads together in one `block_on`, so
/// that one loader thread keeps several requests in flight.
///
/// # Transient failures
///
/// Every request (each ranged GET, each page of a listing) is retried by `object_store`
/// with exponential backoff and jitter when it fails in a way that may pass: the
/// connection is refused or reset, the server answers 5xx, 429 or 408, the request or
/// the body times out, or the response body breaks off (the rest is fetched again). It
/// stops after [`S3Config::max_retries`] retries or once [`S3Config::retry_window`] has
/// passed since the first attempt, whichever comes first, so a server that restarts
/// within the window costs a little latency and no sample. Client errors (404, 403,
/// a range past the end) are never retried.
pub struct S3Store {
    store: Arc<dyn ObjectStore>,
    /// Multi-thread, so that any number of loader threads may `block_on` it at once.
    runtime: Runtime,
    bucket: String,
    /// The prefix, without slashes at either end; empty for a whole bucket.
    prefix: String,
    /// `s3://bucket/prefix`.
    root: String,
    /// The endpoint as named in messages.
    endpoint: String,
}

impl S3Store {
    /// A client for `config`'s bucket and prefix. Nothing is sent yet: a wrong endpoint,
    /// bucket or credentials show at the first [`list`](BlobStore::list) or read.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a malformed URL, only one of the two keys, or settings the
    /// S3 client rejects; [`Error::Storage`] when its I/O threads cannot start.
    pub fn new(config: S3Config) -> Result<S3Store> {
        let (bucket, prefix) = parse_url(&config.url)?;
        let root = match prefix.as_str() {
            "" => format!("s3://{bucket}"),
            _ => format!("s3://{bucket}/{prefix}"),
        };
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: BACKOFF.0,
                max_backoff: BACKOFF.1,
                base: 2.0,
            },
            max_retries: config.max_retries,
            retry_timeout: config.retry_window,
        };
        // `with_allow_http` writes into the client options, so it comes after them.
        let mut builder = AmazonS3Builder::new()
            .with_client_options(ClientOptions::new().with_timeout(config.request_timeout))
            .with_allow_http(config.allow_http)
            .with_bucket_name(&bucket)
            .with_region(&config.region)
            .with_retry(retry);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        match (&config.access_key_id, &config.secret_access_key) {
            (Some(id), Some(secret)) => {
                builder = builder
                    .with_access_key_id(id)
                    .with_secret_access_key(secret);
                if let Some(token) = &config.session_token {
                    builder = builder.with_token(token);
                }
            }
            (None, None) => {
                for (name, value) in &config.credential_chain {
                    let key: AmazonS3ConfigKey =
                        name.to_ascii_lowercase().parse().map_err(|_| {
                            Error::Config(format!("{name} does not configure S3 credentials"))
                        })?;
                    builder = builder.with_config(key, value);
                }
            }
            _ => {
                return Err(Error::Config(format!(
                    "{root}: an S3 access key id needs its secret access key and vice versa \
                     (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
                )))
            }
        }
        let store = builder
            .build()
            .map_err(|e| Error::Config(format!("{root}: {e}")))?;
        // Two workers drive every connection (HTTP parsing, TLS); the requests
        // themselves are polled on the loader threads that call `block_on`.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("nostall-s3")
            .enable_all()
            .build()
            .map_err(|e| Error::Storage {
                location: root.clone(),
                message: format!("cannot start the S3 client's I/O threads: {e}"),
            })?;
        let endpoint = match &config.endpoint {
            Some(endpoint) => endpoint.clone(),
            None => format!("AWS S3 in {}", config.region),
        };
        Ok(S3Store {
            store: Arc::new(store),
            runtime,
            bucket,
            prefix,
            root,
            endpoint,
        })
    }

    /// The full object name of `key`.
    fn object(&self, key: &str) -> std::result::Result<Path, Cause> {
        let name = match self.prefix.as_str() {
            "" => key.to_string(),
            prefix => format!("{prefix}/{key}"),
        };
        Path::parse(&name).map_err(|e| Cause::Io(format!("{key}: not a valid object key ({e})")))
    }

    /// Reads `len` bytes from `offset` of `key` (as listed with `version`) into `out`.
    async fn get(
        &self,
        key: &str,
        version: Option<&str>,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), Cause> {
        out.clear();
        if len == 0 {
            return Ok(());
        }
        let object = self.object(key)?;
        let end = offset
            .checked_add(len)
            .ok_or_else(|| Cause::Io(format!("{}: a range past 2^64 bytes", self.locate(key))))?;
        let too_long = || {
            Cause::Io(format!(
                "{}: asked for bytes {offset}..{end}, the server sent more (changed since it \
                 was indexed, or a faulty server)",
                self.locate(key)
            ))
        };
        // The body is taken chunk by chunk and cut off past the range: a server that sends
        // more (or never stops) must not make this process hold it.
        let received = async {
            let mut options = object_store::GetOptions::new().with_range(Some(offset..end));
            // The server answers 412 if the object is no longer the one listed.
            options.if_match = version.map(str::to_string);
            let mut body = self.store.get_opts(&object, options).await?.into_stream();
            while let Some(chunk) = body.try_next().await? {
                if out.len() + chunk.len() > len as usize {
                    return Ok(Err(too_long()));
                }
                out.extend_from_slice(&chunk);
            }
            Ok(Ok(()))
        }
        .await;
        let received = received.map_err(|e| match e {
            object_store::Error::NotFound { .. } => Cause::Missing,
            object_store::Error::Precondition { .. } => super::blob::changed(&self.locate(key)),
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Cause::PermissionDenied,
            e => Cause::Io(format!(
                "{}: bytes {offset}..{end}: {}",
                self.locate(key),
                describe(&e)
            )),
        });
        if let Err(cause) = received.and_then(|r| r) {
            out.clear();
            return Err(cause);
        }
        if out.len() as u64 != len {
            let got = out.len();
            out.clear();
            return Err(Cause::Io(format!(
                "{}: asked for bytes {offset}..{end}, got {got} bytes (changed since it was \
                 indexed?)",
                self.locate(key)
            )));
        }
        Ok(())
    }

    /// Object `key`'s size and version (its ETag), as a listing gives them: one request,
    /// however many objects the prefix holds.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the object when there is none by that name;
    /// [`Error::Storage`] saying what to check when the server cannot be asked.
    pub(crate) fn info(&self, key: &str) -> Result<BlobInfo> {
        let location = self.locate(key);
        let object = self
            .object(key)
            .map_err(|cause| Error::Config(format!("{location}: {cause}")))?;
        let meta = self
            .runtime
            .block_on(self.store.head(&object))
            .map_err(|e| match e {
                object_store::Error::NotFound { .. } => Error::Config(format!(
                    "{location}: no such object (check the key, and that it was uploaded to \
                     {} at {})",
                    self.bucket, self.endpoint
                )),
                e => self.request_error(location.clone(), "cannot read", &e),
            })?;
        Ok(BlobInfo {
            key: key.to_string(),
            size: meta.size,
            version: meta.e_tag,
        })
    }

    /// What a failed request for `location` (to list it, to read it: `doing`) means, and
    /// what to check.
    fn request_error(&self, location: String, doing: &str, e: &object_store::Error) -> Error {
        let text = describe(e);
        let hint = if is_connect_error(e) {
            format!(
                "cannot reach the server at {} (is it running? is the endpoint right? \
                 set AWS_ENDPOINT_URL for a non-AWS server)",
                self.endpoint
            )
        } else if text.contains("NoSuchBucket") {
            format!(
                "bucket `{}` does not exist at {} (check the bucket name and the endpoint)",
                self.bucket, self.endpoint
            )
        } else if matches!(
            e,
            object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }
        ) || [
            "AccessDenied",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
        ]
        .iter()
        .any(|code| text.contains(code))
        {
            "access denied (check the credentials: AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY, and the bucket's policy)"
                .to_string()
        } else {
            format!(
                "check the endpoint ({}), the credentials and the bucket name",
                self.endpoint
            )
        };
        Error::Storage {
            location,
            message: format!("{doing}: {hint}: {text}"),
        }
    }
}

/// `e` and, when it adds something, its innermost cause: object_store's message for a
/// refused connection stops at "error sending request".
fn describe(e: &object_store::Error) -> String {
    let text = e.to_string();
    let mut innermost: &dyn StdError = e;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    let cause = innermost.to_string();
    if text.contains(&cause) {
        text
    } else {
        format!("{text} ({cause})")
    }
}

/// Whether the request never reached a server: refused, unresolvable, or timed out
/// while connecting.
fn is_connect_error(e: &object_store::Error) -> bool {
    let mut source: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(http) = err.downcast_ref::<HttpError>() {
            return http.kind() == HttpErrorKind::Connect;
        }
        source = err.source();
    }
    false
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store")
            .field("root", &self.root)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl BlobStore for S3Store {
    fn list(&self) -> Result<Vec<BlobInfo>> {
        let prefix = Path::parse(&self.prefix).expect("checked in S3Store::new");
        let prefix = (!self.prefix.is_empty()).then_some(&prefix);
        let listed: Vec<_> = self
            .runtime
            .block_on(self.store.list(prefix).try_collect())
            .map_err(|e| self.request_error(self.root.clone(), "cannot list", &e))?;
        let mut blobs: Vec<BlobInfo> = listed
            .into_iter()
            .filter_map(|meta| {
                let name: &str = meta.location.as_ref();
                let key = match self.prefix.as_str() {
                    "" => name,
                    prefix => name.strip_prefix(prefix)?.strip_prefix('/')?,
                };
                (!key.is_empty()).then(|| BlobInfo {
                    key: key.to_string(),
                    size: meta.size,
                    version: meta.e_tag.clone(),
                })
            })
            .collect();
        blobs.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        Ok(blobs)
    }

    fn read_version(
        &self,
        key: &str,
        version: Option<&str>,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), Cause> {
        self.runtime
            .block_on(self.get(key, version, offset, len, out))
    }

    /// The reads run together on the client's event loop, polled by this thread: one
    /// thread keeps up to `READS_AT_ONCE` in flight, asking for another as one ends.
    fn read_each_range<'a>(
        &self,
        next: &mut (dyn FnMut() -> Option<RangeRead<'a>> + '_),
        done: &mut ReadDone<'_>,
    ) {
        let get = |number: usize, mut read: RangeRead<'a>| async move {
            let (key, version, offset, len) = (read.key, read.version, read.offset, read.len);
            let result = self.get(key, version, offset, len, &mut read.out).await;
            (number, read.out, result)
        };
        self.runtime.block_on(async {
            let mut in_flight = FuturesUnordered::new();
            let mut given = 0;
            loop {
                // Asked again after every read that ends: it may have made room.
                while in_flight.len() < READS_AT_ONCE {
                    let Some(read) = next() else { break };
                    in_flight.push(get(given, read));
                    given += 1;
                }
                let Some((number, out, result)) = in_flight.next().await else {
                    return; // none in flight, and none to start
                };
                done(number, out, result);
            }
        });
    }

    fn reads_at_once(&self) -> usize {
        READS_AT_ONCE
    }

    fn root(&self) -> String {
        self.root.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_bucket_and_prefix() {
        let split = |url| parse_url(url).unwrap();
        assert_eq!(split("s3://b"), ("b".into(), "".into()));
        assert_eq!(split("s3://b/"), ("b".into(), "".into()));
        assert_eq!(split("s3://b/x/y/"), ("b".into(), "x/y".into()));
        for bad in ["b/x", "s3:///x", "gs://b/x", "s3://b/x//y", "s3://b/x/../y"] {
            assert!(matches!(parse_url(bad), Err(Error::Config(_))), "{bad}");
        }
    }

    #[test]
    fn the_root_is_the_url_and_secrets_stay_out_of_debug_output() {
        let mut config = S3Config::from_url("s3://bucket/some/prefix/").unwrap();
        config.endpoint = Some("http://127.0.0.1:1".into());
        config.allow_http = true;
        config.access_key_id = Some("id".into());
        config.secret_access_key = Some("very-secret".into());
        assert!(!format!("{config:?}").contains("very-secret"));
        let store = S3Store::new(config).unwrap();
        assert_eq!(store.root(), "s3://bucket/some/prefix");
        assert_eq!(store.locate("a/b.jpg"), "s3://bucket/some/prefix/a/b.jpg");
        assert_eq!(
            store.object("a/b.jpg").unwrap().as_ref(),
            "some/prefix/a/b.jpg"
        );
    }

    #[test]
    fn credential_chain_variables_are_known_to_object_store() {
        assert_eq!(CREDENTIAL_CHAIN_VARS.len(), 7);
        assert_eq!(CREDENTIAL_CHAIN_VARS[0], "AWS_WEB_IDENTITY_TOKEN_FILE");
        for name in CREDENTIAL_CHAIN_VARS {
            assert!(
                name.to_ascii_lowercase()
                    .parse::<AmazonS3ConfigKey>()
                    .is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn one_key_without_the_other_is_a_config_error() {
        let mut config = S3Config::from_url("s3://bucket").unwrap();
        config.access_key_id = Some("id".into());
        config.secret_access_key = None;
        assert!(matches!(S3Store::new(config), Err(Error::Config(_))));
    }
}
