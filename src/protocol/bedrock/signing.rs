//! Steps 5 and 7, the protocol seam: AWS SigV4 for Bedrock.
//!
//! Three ways a Bedrock request arrives, as gateways are deployed: with a
//! Bedrock API key (`Authorization: Bearer`), passed through; with no
//! credential (Claude Code's `CLAUDE_CODE_SKIP_BEDROCK_AUTH=1`), which
//! Condenser signs with the credentials of its own environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//! `AWS_REGION`); or signed by the client. A client's signature covers
//! the body, so such a request goes upstream byte for byte or not at all.

use crate::protocol::{Signer, SigningError};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use http::HeaderMap;
use std::sync::LazyLock;
use std::time::SystemTime;

/// The scheme of a SigV4 `Authorization` header.
const SCHEME: &str = "AWS4-HMAC-SHA256 ";

/// Bedrock's runtime signs as this service.
const SERVICE: &str = "bedrock";

/// The access key id of a client's SigV4 signature, when the request
/// carries one (`Credential=AKID/date/region/service/aws4_request`).
pub(super) fn access_key_of(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let fields = value.strip_prefix(SCHEME)?;
    let credential = fields
        .split(',')
        .find_map(|field| field.trim().strip_prefix("Credential="))?;
    credential.split('/').next().filter(|key| !key.is_empty())
}

/// Condenser's own signing credentials, read once from its environment.
struct Own {
    credentials: Credentials,
    region: Option<String>,
}

static OWN: LazyLock<Option<Own>> = LazyLock::new(|| {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    let credentials = Credentials::new(
        var("AWS_ACCESS_KEY_ID")?,
        var("AWS_SECRET_ACCESS_KEY")?,
        var("AWS_SESSION_TOKEN"),
        None,
        "environment",
    );
    let region = var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION"));
    Some(Own {
        credentials,
        region,
    })
});

/// The region of a runtime host (`bedrock-runtime.us-west-2.amazonaws.com`,
/// `bedrock-runtime-fips.…`), else the SDKs' default.
fn region_of_host(host: &str) -> &str {
    let mut labels = host.split('.');
    let service = labels.next().unwrap_or_default();
    match (service.starts_with("bedrock-runtime"), labels.next()) {
        (true, Some(region)) if host.ends_with(".amazonaws.com") => region,
        _ => "us-east-1",
    }
}

/// SigV4 for Bedrock.
pub(super) struct SigV4;

impl Signer for SigV4 {
    fn signed_by_client(&self, headers: &HeaderMap) -> bool {
        access_key_of(headers).is_some()
    }

    fn sign(&self, request: &mut reqwest::Request) -> Result<(), SigningError> {
        let carries_credential = crate::protocol::bearer_or_key(request.headers()).is_some();
        let Some(own) = OWN.as_ref().filter(|_| !carries_credential) else {
            return Ok(());
        };
        let host = request.url().host_str().unwrap_or_default();
        let region = own
            .region
            .as_deref()
            .unwrap_or_else(|| region_of_host(host));
        let identity = own.credentials.clone().into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name(SERVICE)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|error| SigningError(error.to_string()))?
            .into();
        let body = match request.body().and_then(reqwest::Body::as_bytes) {
            Some(bytes) => SignableBody::Bytes(bytes),
            None => SignableBody::UnsignedPayload,
        };
        let headers = request
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        let signable = SignableRequest::new(
            request.method().as_str(),
            request.url().as_str(),
            headers,
            body,
        )
        .map_err(|error| SigningError(error.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|error| SigningError(error.to_string()))?
            .into_parts();
        let (headers, _) = instructions.into_parts();
        for header in headers {
            let value = http::HeaderValue::from_str(header.value())
                .map_err(|error| SigningError(error.to_string()))?;
            request.headers_mut().insert(header.name(), value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_access_key_of_a_signature_names_the_caller() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261128/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc"
                .parse()
                .expect("header"),
        );
        assert_eq!(access_key_of(&headers), Some("AKIDEXAMPLE"));
        headers.insert("authorization", "Bearer key".parse().expect("header"));
        assert_eq!(access_key_of(&headers), None);
    }

    #[test]
    fn the_region_comes_from_the_runtime_host() {
        assert_eq!(
            region_of_host("bedrock-runtime.eu-west-3.amazonaws.com"),
            "eu-west-3"
        );
        assert_eq!(
            region_of_host("bedrock-runtime-fips.us-gov-west-1.amazonaws.com"),
            "us-gov-west-1"
        );
        assert_eq!(region_of_host("127.0.0.1"), "us-east-1");
    }
}
