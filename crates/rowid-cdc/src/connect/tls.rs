//! TLS as libpq's `sslmode` and `sslrootcert` describe it, for both clients: the rustls
//! configuration of the SQL connections ([`client_config`]) and the replication client's
//! [`pgwire_replication::TlsConfig`] ([`replication_tls`]), from one [`Conninfo`], so the two
//! connections of a run verify the server the same way.
//!
//! | sslmode | TLS | chain verified | host name verified |
//! |---|---|---|---|
//! | `disable` | never | | |
//! | `prefer` | if the server offers it | no | no |
//! | `require` | yes | no (yes with a root certificate, as libpq) | no |
//! | `verify-ca` | yes | yes | no |
//! | `verify-full` | yes | yes | yes (`host`, also with `hostaddr`) |
//!
//! rustls with the *ring* provider, because `pgwire-replication` (the replication transport)
//! brings rustls already: one TLS stack for every connection, no system OpenSSL to link.

use std::sync::Arc;

use pgwire_replication::config::{SslMode as ReplicationSslMode, TlsConfig};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::connect::conninfo::{Conninfo, Host, RootCert, SslMode};

/// What a connection does about TLS, once `require` with a root certificate is read as
/// `verify-ca`.
pub fn effective_mode(info: &Conninfo) -> SslMode {
    match (info.sslmode, &info.sslrootcert) {
        (SslMode::Require, Some(_)) => SslMode::VerifyCa,
        (mode, _) => mode,
    }
}

/// The name TLS verifies and sends (SNI): `host`, even when `hostaddr` says where to connect.
pub fn server_name(info: &Conninfo) -> Result<ServerName<'static>, String> {
    let name = match &info.host {
        Host::Tcp(h) => h.clone(),
        Host::Unix(_) => return Err("TLS is not used on unix sockets".into()),
    };
    ServerName::try_from(name.clone()).map_err(|_| format!("{name:?} is not a valid host name"))
}

fn roots(info: &Conninfo, mode: SslMode) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match &info.sslrootcert {
        Some(RootCert::File(path)) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?
                .collect::<Result<_, _>>()
                .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!(
                    "sslrootcert {}: no certificate in it",
                    path.display()
                ));
            }
        }
        Some(RootCert::System) => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        None => {
            return Err(format!(
                "sslmode={} needs the root certificate to verify the server with: \
                 sslrootcert=FILE (or ~/.postgresql/root.crt, or sslrootcert=system)",
                mode.name()
            ));
        }
    }
    Ok(roots)
}

/// The rustls configuration of an SQL connection, `None` for `disable`.
pub fn client_config(info: &Conninfo) -> Result<Option<Arc<ClientConfig>>, String> {
    let mode = effective_mode(info);
    if mode == SslMode::Disable {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let config = match mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
            .with_no_client_auth(),
        SslMode::VerifyCa => {
            let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(info, mode)?),
                provider,
            )
            .build()
            .map_err(|e| format!("TLS: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
                .with_no_client_auth()
        }
        SslMode::VerifyFull => builder
            .with_root_certificates(roots(info, mode)?)
            .with_no_client_auth(),
    };
    Ok(Some(Arc::new(config)))
}

/// The replication client's TLS settings for the same connection string. `certificate_names`
/// are the DNS names of the certificate the server showed the SQL connection: under
/// `verify-ca` the replication client is told to expect one of them, because its own
/// chain-only verifier (pgwire-replication 0.5) still refuses a name mismatch as rustls 0.23
/// reports it; the chain is verified against the same root certificate all the same, which is
/// what verify-ca means.
pub fn replication_tls(info: &Conninfo, certificate_names: &[String]) -> Result<TlsConfig, String> {
    let mode = effective_mode(info);
    let ca = match &info.sslrootcert {
        Some(RootCert::File(p)) => Some(p.clone()),
        Some(RootCert::System) | None => None,
    };
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) {
        // Fails here, with the same message as the SQL connection, when there is none.
        roots(info, mode)?;
    }
    let mut tls = match mode {
        SslMode::Disable => TlsConfig::disabled(),
        SslMode::Prefer => TlsConfig {
            mode: ReplicationSslMode::Prefer,
            ..TlsConfig::default()
        },
        SslMode::Require => TlsConfig::require(),
        SslMode::VerifyCa => TlsConfig::verify_ca(ca),
        SslMode::VerifyFull => TlsConfig::verify_full(ca),
    };
    if mode == SslMode::VerifyCa {
        let name = certificate_names
            .iter()
            .map(|n| n.replacen("*.", "x.", 1))
            .find(|n| ServerName::try_from(n.clone()).is_ok())
            .ok_or_else(|| {
                "sslmode=verify-ca: the server's certificate has no DNS name the replication \
                 client can verify it under; use verify-full, or a certificate with a DNS \
                 subject alternative name"
                    .to_string()
            })?;
        tls = tls.with_sni_hostname(name);
    } else if info.hostaddr.is_some()
        && let Host::Tcp(name) = &info.host
    {
        tls = tls.with_sni_hostname(name.clone());
    }
    Ok(tls)
}

/// `prefer` and `require` without a root certificate: encrypted, the server not verified
/// (libpq's behaviour; use verify-full against an active attacker).
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to the root certificate; the name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
