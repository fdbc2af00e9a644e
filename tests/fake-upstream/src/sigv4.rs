//! AWS SigV4 verified as AWS verifies it: the request's signed headers,
//! its path and query and its body's hash signed again with the caller's
//! secret at the request's own `x-amz-date`, compared with the signature
//! it carries. The signing is `aws-sigv4`'s (the AWS SDK's own), fed only
//! what the request says it signed.

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_smithy_types::date_time::{DateTime, Format};
use std::time::SystemTime;

/// `Ok` when the request's SigV4 signature is `access_key`'s over exactly
/// these bytes; else AWS's wording of why not.
pub fn verify(
    parts: &http::request::Parts,
    body: &[u8],
    access_key: &str,
    secret: &str,
) -> Result<(), String> {
    const INVALID: &str = "The security token included in the request is invalid.";
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let authorization = header("authorization").ok_or(INVALID)?;
    let field = |name: &str| {
        authorization
            .split([' ', ','])
            .find_map(|part| part.trim().strip_prefix(name))
    };
    let (credential, signed, signature) = (
        field("Credential=").ok_or(INVALID)?,
        field("SignedHeaders=").ok_or(INVALID)?,
        field("Signature=").ok_or(INVALID)?,
    );
    let mut scope = credential.split('/');
    if scope.next() != Some(access_key) {
        return Err(INVALID.into());
    }
    let (_, region, service) = (scope.next(), scope.next(), scope.next());
    let (region, service) = (region.ok_or(INVALID)?, service.ok_or(INVALID)?);
    let time = signing_time(header("x-amz-date").ok_or(INVALID)?).ok_or(INVALID)?;
    let headers = signed
        .split(';')
        .filter(|name| *name != "x-amz-date")
        .filter_map(|name| Some((name, header(name)?)));
    let host = header("host").ok_or(INVALID)?;
    let uri = format!("http://{host}{}", parts.uri);
    let identity = Credentials::new(access_key, secret, None, None, "fake").into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let signable = SignableRequest::new(
        parts.method.as_str(),
        uri,
        headers,
        SignableBody::Bytes(body),
    )
    .map_err(|e| e.to_string())?;
    let expected = sign(signable, &params).map_err(|e| e.to_string())?;
    match expected.signature() == signature {
        true => Ok(()),
        false => Err("The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.".into()),
    }
}

/// `20261128T151300Z` as a time.
fn signing_time(amz_date: &str) -> Option<SystemTime> {
    let b = amz_date.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let at = |range: std::ops::Range<usize>| amz_date.get(range);
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        at(0..4)?,
        at(4..6)?,
        at(6..8)?,
        at(9..11)?,
        at(11..13)?,
        at(13..15)?
    );
    SystemTime::try_from(DateTime::from_str(&rfc3339, Format::DateTime).ok()?).ok()
}
