//! Step 2, identify: the tenant.
//!
//! A tenant is a digest of the caller's credential, never the credential.

use crate::domain::Hex32;
use sha2::{Digest, Sha256};
use std::fmt;

/// Hex SHA-256 of `salt || credential`. The salt lets an operator make tenant
/// ids useless outside their own deployment; the credential itself is dropped
/// as soon as this is computed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TenantId(String);

impl TenantId {
    pub fn from_credential(salt: &[u8], credential: Option<&[u8]>) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"condenser-tenant-v1\0");
        hasher.update(salt);
        hasher.update(b"\0");
        hasher.update(credential.unwrap_or_default());
        Self(Hex32::of(&hasher.finalize().into()).as_str().to_owned())
    }

    /// Rebuilds a tenant id read back from storage.
    pub fn from_stored(hex: String) -> Self {
        Self(hex)
    }

    /// The first characters of the digest: enough to tell tenants apart,
    /// short enough to keep them opaque.
    pub fn short(&self) -> String {
        let digest = self.as_str();
        digest
            .get(..crate::domain::SHORT_ID_CHARS)
            .unwrap_or(digest)
            .to_owned()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TenantId({})", &self.0[..12])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn different_credentials_give_different_tenants() {
        let a = TenantId::from_credential(b"", Some(b"Bearer sk-a"));
        let b = TenantId::from_credential(b"", Some(b"Bearer sk-b"));
        assert_ne!(a, b);
    }

    #[test]
    fn the_salt_changes_the_tenant() {
        let plain = TenantId::from_credential(b"", Some(b"Bearer sk-a"));
        let salted = TenantId::from_credential(b"pepper", Some(b"Bearer sk-a"));
        assert_ne!(plain, salted);
    }

    #[test]
    fn the_id_does_not_contain_the_credential() {
        let id = TenantId::from_credential(b"", Some(b"sk-secret-123"));
        assert!(!id.as_str().contains("sk-secret-123"));
        assert_eq!(id.as_str().len(), 64);
    }
}
