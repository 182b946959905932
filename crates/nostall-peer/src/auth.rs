//! The job's shared secret, and the TLS identity both planes derive from it.
//!
//! Every node of a job reads the same secret from its environment ([`SECRET_VAR`]), as
//! the job's launcher distributes it. From it each node derives one Ed25519 key pair
//! (HMAC-SHA256 of the secret, under a fixed label, is the key's seed) and a self-signed
//! certificate for it, the same on every node. Both planes run TLS 1.3 (rustls) with that
//! certificate on *both* ends and accept no other: a server proves it knows the secret
//! to the client and the client to the server (mutual authentication), the secret never
//! crosses the network, every record is encrypted and authenticated, and a recorded
//! connection cannot be replayed (each handshake has fresh keys, each record a sequence
//! number). Someone without the secret can neither read the traffic, nor forge or replay
//! a request or an answer, nor pose as a node.
//!
//! What the secret does not give: the nodes of one job share one identity, so a node
//! cannot prove *which* node it is; the service binds what it can to the connection
//! instead (a node registers the address it calls from, and each node only once).

use std::sync::Arc;

use ring::hmac;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, ServerConfig,
    SignatureScheme,
};

use crate::error::{Error, Result};

/// The environment variable holding the secret.
pub const SECRET_VAR: &str = "NOSTALL_PEER_SECRET";

/// The shortest secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// The name the certificate is issued to, and the one clients ask for.
const SERVER_NAME: &str = "nostall-peer";

/// A job's shared secret (never printed).
#[derive(Clone)]
pub struct Secret {
    key: hmac::Key,
    /// The bytes themselves, for [`Secret::bytes`].
    bytes: Arc<[u8]>,
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
            bytes: bytes.into(),
        })
    }

    /// The secret's bytes, to hand to a process of the same user that joins the job for
    /// this one (the node agent, over its socket in a directory only the user can
    /// enter). Never log or send them anywhere else.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
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

    /// The HMAC-SHA256 of `parts`, one after another, with the secret.
    pub(crate) fn sign(&self, parts: &[&[u8]]) -> hmac::Tag {
        let mut context = hmac::Context::with_key(&self.key);
        for part in parts {
            context.update(part);
        }
        context.sign()
    }

    /// Whether `tag` is the HMAC-SHA256 of `parts` with the secret (in constant time).
    pub(crate) fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> std::result::Result<(), ()> {
        hmac::verify(&self.key, &parts.concat(), tag).map_err(|_| ())
    }

    /// The job's TLS identity.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if the certificate cannot be made (a bug: the key is always valid).
    pub fn identity(&self) -> Result<Identity> {
        Identity::derive(self)
    }
}

/// TLS 1.3 configurations for both ends of a connection between the nodes of one job:
/// each presents the certificate derived from the secret and accepts only that one.
#[derive(Debug, Clone)]
pub struct Identity {
    /// For the accepting end.
    pub server: Arc<ServerConfig>,
    /// For the connecting end.
    pub client: Arc<ClientConfig>,
}

impl Identity {
    fn derive(secret: &Secret) -> Result<Identity> {
        let broken = |e: String| Error::Config(format!("cannot make the job's TLS identity: {e}"));
        let seed = hmac::sign(&secret.key, b"nostall-peer/v2/tls-identity");
        // PKCS#8 v1 of an Ed25519 private key (RFC 8410): a fixed prefix, then the seed.
        let mut pkcs8 = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        pkcs8.extend_from_slice(&seed.as_ref()[..32]);
        let key = PrivatePkcs8KeyDer::from(pkcs8);
        let pair = rcgen::KeyPair::try_from(&key).map_err(|e| broken(e.to_string()))?;
        // Every field fixed (Ed25519 signatures are deterministic too): every node makes
        // the same certificate, byte for byte.
        let mut params = rcgen::CertificateParams::new(vec![SERVER_NAME.to_string()])
            .map_err(|e| broken(e.to_string()))?;
        params.serial_number = Some(rcgen::SerialNumber::from(1u64));
        let cert = params
            .self_signed(&pair)
            .map_err(|e| broken(e.to_string()))?
            .der()
            .clone();
        // AES-128-GCM first: on CPUs with AES instructions the cheapest of TLS 1.3's
        // suites for bulk data, which is what the data plane carries.
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites = vec![
            rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
            rustls::crypto::ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ];
        let provider = Arc::new(provider);
        let pinned = Arc::new(Pinned {
            cert: cert.clone(),
            algorithms: provider.signature_verification_algorithms,
        });
        let key = PrivateKeyDer::Pkcs8(key);
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| broken(e.to_string()))?
            .with_client_cert_verifier(pinned.clone())
            .with_single_cert(vec![cert.clone()], key.clone_key())
            .map_err(|e| broken(e.to_string()))?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| broken(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(pinned.clone())
            .with_client_auth_cert(vec![cert], key)
            .map_err(|e| broken(e.to_string()))?;
        Ok(Identity {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The name a client asks for in its handshake.
    pub fn server_name() -> ServerName<'static> {
        ServerName::try_from(SERVER_NAME).expect("a valid DNS name")
    }
}

/// Completes a TLS handshake over a blocking stream (within the stream's own deadline):
/// for this crate's planes, and for other services of the job on the same identity
/// (`nostall-remote`).
pub fn handshake<C, T, S>(tls: &mut rustls::StreamOwned<C, T>) -> std::io::Result<()>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<S>>,
    T: std::io::Read + std::io::Write,
    S: rustls::SideData,
{
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(())
}

/// Accepts exactly the job's certificate, and checks that the other end holds its key.
#[derive(Debug)]
struct Pinned {
    cert: CertificateDer<'static>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl Pinned {
    fn check(&self, presented: &CertificateDer<'_>, chain: &[CertificateDer<'_>]) -> bool {
        presented.as_ref() == self.cert.as_ref() && chain.is_empty()
    }

    fn refused() -> rustls::Error {
        rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure)
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        if self.check(end_entity, intermediates) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(Pinned::refused())
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("only TLS 1.3 is offered".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The same checks from the accepting end (signatures as for a server's certificate).
impl ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        if self.check(end_entity, intermediates) {
            Ok(ClientCertVerified::assertion())
        } else {
            Err(Pinned::refused())
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        ServerCertVerifier::verify_tls12_signature(self, message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        ServerCertVerifier::verify_tls13_signature(self, message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        ServerCertVerifier::supported_verify_schemes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a client of `client`'s secret and a server of `server`'s complete a TLS
    /// handshake over loopback, both ends judging.
    fn handshake_between(client: &[u8], server: &[u8]) -> bool {
        let server = Secret::new(server).unwrap().identity().unwrap().server;
        let client = Secret::new(client).unwrap().identity().unwrap().client;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepting = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            let conn = rustls::ServerConnection::new(server).unwrap();
            handshake(&mut rustls::StreamOwned::new(conn, tcp)).is_ok()
        });
        let tcp = std::net::TcpStream::connect(addr).unwrap();
        let conn = rustls::ClientConnection::new(client, Identity::server_name()).unwrap();
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        // The client finishes first in TLS 1.3; the server's verdict on its certificate
        // arrives with the first read.
        let client_ok = handshake(&mut stream).is_ok()
            && std::io::Write::write_all(&mut stream, b"x").is_ok()
            && std::io::Write::flush(&mut stream).is_ok();
        let server_ok = accepting.join().unwrap();
        client_ok && server_ok
    }

    #[test]
    fn nodes_with_the_same_secret_meet_and_others_are_refused_by_both_ends() {
        let ours = b"the secret of this unit test";
        assert!(handshake_between(ours, ours));
        assert!(!handshake_between(b"another job's secret, 123", ours));
        assert!(!handshake_between(ours, b"another job's secret, 123"));
    }

    #[test]
    fn short_secrets_are_refused_with_advice() {
        let err = Secret::new(b"short").unwrap_err().to_string();
        assert!(err.contains("at least 16"), "{err}");
    }
}
