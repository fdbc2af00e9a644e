//! Step 1, accept: how many sockets each credential holds.
//!
//! A socket outlives its requests, so sockets are bounded per tenant
//! (`server.websocket_connections_per_tenant`): one credential looping on
//! connects cannot hold every descriptor. The tenant is the salted digest
//! of the credential, as everywhere, never the credential.

use crate::conversation::tenant::TenantId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub struct Sockets {
    per_tenant: usize,
    open: Mutex<HashMap<String, usize>>,
}

/// One open socket of a tenant, counted until dropped.
pub struct Slot {
    sockets: Arc<Sockets>,
    tenant: String,
}

impl Sockets {
    pub fn new(per_tenant: usize) -> Arc<Self> {
        Arc::new(Self {
            per_tenant,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more socket of `tenant`, or `None` at its limit.
    pub fn open(self: &Arc<Self>, tenant: &TenantId) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(tenant.as_str().to_string()).or_default();
        if *count >= self.per_tenant {
            return None;
        }
        *count += 1;
        metrics::gauge!("condenser_websocket_connections").increment(1.0);
        Some(Slot {
            sockets: self.clone(),
            tenant: tenant.as_str().to_string(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.sockets.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.tenant) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.tenant);
            }
        }
        metrics::gauge!("condenser_websocket_connections").decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_has_its_own_limit_and_a_closed_socket_frees_its_slot() {
        let sockets = Sockets::new(1);
        let (a, b) = (
            TenantId::from_credential(b"", Some(b"a")),
            TenantId::from_credential(b"", Some(b"b")),
        );
        let first = sockets.open(&a).expect("room for one");
        assert!(sockets.open(&a).is_none(), "the limit holds");
        assert!(sockets.open(&b).is_some(), "another tenant is unaffected");
        drop(first);
        assert!(sockets.open(&a).is_some(), "a closed socket frees its slot");
    }
}
