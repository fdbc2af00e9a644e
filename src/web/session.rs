//! Beside the flow, the operator page: the session a login opens.
//!
//! A session cookie is `ISSUED.MAC`: the second it was issued (Unix time)
//! and an HMAC-SHA256 of it under a key derived from the admin token. So
//! it carries no secret, cannot be moved forward in time, expires
//! `admin_session_ttl` after the login whatever the browser keeps, and
//! every session ends when the token changes: the key changes with it.
//! Instances that share the token accept each other's sessions.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;

/// How far in the future an issue time may lie: another instance's clock.
const CLOCK_SKEW_SECS: u64 = 60;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    // Only fixed-length-key MACs refuse a key; HMAC takes any.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// The signing key: the token's digest, so the token itself signs nothing
/// that leaves the process.
fn key(token: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(b"condenser-admin-session-key\0");
    hasher.update(token.as_bytes());
    hasher.finalize().into()
}

fn mac(token: &str, issued: &str) -> String {
    hex::encode(hmac(&key(token), issued.as_bytes()))
}

/// A new session's cookie value.
pub fn issue(token: &str) -> String {
    let issued = now_secs().to_string();
    let mac = mac(token, &issued);
    format!("{issued}.{mac}")
}

/// Whether `value` is a session `token` issued less than `ttl` ago.
pub fn valid(value: &str, token: &str, ttl: Duration) -> bool {
    valid_at(value, token, ttl, now_secs())
}

fn valid_at(value: &str, token: &str, ttl: Duration, now: u64) -> bool {
    let Some((issued, presented)) = value.split_once('.') else {
        return false;
    };
    let Ok(issued_at) = issued.parse::<u64>() else {
        return false;
    };
    let authentic: bool = presented
        .as_bytes()
        .ct_eq(mac(token, issued).as_bytes())
        .into();
    authentic
        && issued_at <= now.saturating_add(CLOCK_SKEW_SECS)
        && now < issued_at.saturating_add(ttl.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "admin-token-0123456789";
    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2.
        let mac = hmac(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_session_lasts_its_ttl_and_no_longer() {
        let issued = format!("1000.{}", mac(TOKEN, "1000"));
        assert!(valid_at(&issued, TOKEN, HOUR, 1000));
        assert!(valid_at(&issued, TOKEN, HOUR, 4599));
        assert!(!valid_at(&issued, TOKEN, HOUR, 4600));
        assert!(!valid_at(&issued, TOKEN, HOUR, 900), "issued in the future");
    }

    #[test]
    fn an_edited_or_foreign_session_is_refused() {
        let value = issue(TOKEN);
        assert!(valid(&value, TOKEN, HOUR));
        assert!(!valid(&value, "another-token-0123456789", HOUR));
        let (issued, mac) = value.split_once('.').expect("issued.mac");
        let later = issued.parse::<u64>().expect("seconds") + 1;
        assert!(!valid(&format!("{later}.{mac}"), TOKEN, HOUR));
        assert!(!valid(mac, TOKEN, HOUR));
        assert!(!valid("", TOKEN, HOUR));
    }
}
