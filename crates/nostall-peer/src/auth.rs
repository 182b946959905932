//! The job's shared secret, and how peers prove they know it.
//!
//! Every node of a job reads the same secret from its environment ([`SECRET_VAR`]), as
//! the job's launcher distributes it. The data plane uses challenge–response: the server
//! sends a fresh random nonce, the client answers with HMAC-SHA256(secret, nonce), so the
//! secret never crosses the network and a recorded answer is useless on the next
//! connection. The control plane (gRPC) carries HMAC-SHA256(secret, a fixed label) in a
//! request header: it proves knowledge of the secret to a listener, but anyone able to
//! record the job's traffic could replay it. Neither plane encrypts; the service is meant
//! for the job's own network, like the collective-communication traffic beside it.

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::error::{Error, Result};

/// The environment variable holding the secret.
pub const SECRET_VAR: &str = "NOSTALL_PEER_SECRET";

/// The shortest secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// Bytes of a data-plane challenge.
pub(crate) const NONCE_BYTES: usize = 16;

/// Bytes of an HMAC-SHA256 tag.
pub(crate) const TAG_BYTES: usize = 32;

/// What a tag proves: the same secret signs different things on the two planes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Purpose {
    Data,
    Control,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::Data => b"nostall-peer/v1/data",
            Purpose::Control => b"nostall-peer/v1/control",
        }
    }
}

/// A job's shared secret (never printed).
#[derive(Clone)]
pub struct Secret {
    key: hmac::Key,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A secret from its bytes.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when it is shorter than [`MIN_SECRET_BYTES`].
    pub fn new(bytes: &[u8]) -> Result<Secret> {
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(Error::Config(format!(
                "the peer secret is {} bytes; use at least {MIN_SECRET_BYTES} (for example \
                 the output of `openssl rand -hex 32`), the same on every node",
                bytes.len()
            )));
        }
        Ok(Secret {
            key: hmac::Key::new(hmac::HMAC_SHA256, bytes),
        })
    }

    /// The secret in [`SECRET_VAR`].
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the variable is unset or too short.
    pub fn from_env() -> Result<Secret> {
        match std::env::var_os(SECRET_VAR) {
            Some(value) => Secret::new(value.as_encoded_bytes()),
            None => Err(Error::Config(format!(
                "{SECRET_VAR} is not set: the peer service requires a shared secret. Set it \
                 to the same value on every node of the job (for example \
                 `export {SECRET_VAR}=$(openssl rand -hex 32)` before launching)"
            ))),
        }
    }

    /// The tag of `challenge` for `purpose`.
    pub(crate) fn sign(&self, purpose: Purpose, challenge: &[u8]) -> [u8; TAG_BYTES] {
        let mut context = hmac::Context::with_key(&self.key);
        context.update(purpose.label());
        context.update(challenge);
        let mut tag = [0; TAG_BYTES];
        tag.copy_from_slice(context.sign().as_ref());
        tag
    }

    /// Whether `tag` is the tag of `challenge` for `purpose` (in constant time).
    pub(crate) fn verify(&self, purpose: Purpose, challenge: &[u8], tag: &[u8]) -> bool {
        let mut message = purpose.label().to_vec();
        message.extend_from_slice(challenge);
        hmac::verify(&self.key, &message, tag).is_ok()
    }

    /// The control plane's request header value: the hex tag of an empty challenge.
    pub(crate) fn control_token(&self) -> String {
        self.sign(Purpose::Control, &[])
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// A fresh random challenge.
pub(crate) fn nonce() -> [u8; NONCE_BYTES] {
    let mut nonce = [0; NONCE_BYTES];
    SystemRandom::new()
        .fill(&mut nonce)
        .expect("the operating system's random source works");
    nonce
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_verifies_only_with_the_same_secret_purpose_and_challenge() {
        let a = Secret::new(b"0123456789abcdef").unwrap();
        let b = Secret::new(b"0123456789abcdeX").unwrap();
        let tag = a.sign(Purpose::Data, b"nonce");
        assert!(a.verify(Purpose::Data, b"nonce", &tag));
        assert!(!b.verify(Purpose::Data, b"nonce", &tag));
        assert!(!a.verify(Purpose::Control, b"nonce", &tag));
        assert!(!a.verify(Purpose::Data, b"other", &tag));
        assert!(!a.verify(Purpose::Data, b"nonce", &tag[..31]));
    }

    #[test]
    fn short_secrets_are_refused_with_advice() {
        let err = Secret::new(b"short").unwrap_err().to_string();
        assert!(err.contains("at least 16"), "{err}");
        assert_ne!(nonce(), nonce());
    }
}
