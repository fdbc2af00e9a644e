//! Beside the flow, configuration: what may be printed.
//!
//! The configuration as it may be printed (`condenser check-config`): every
//! secret replaced. The database URL's password and every query value go
//! (drivers take passwords and key files there too), and so does the
//! tenant salt, which would let anyone holding a key compute its tenant
//! digest.

use super::Settings;

const REDACTED: &str = "REDACTED";

impl Settings {
    pub fn redacted(&self) -> Settings {
        let mut shown = self.clone();
        // Upstream base URLs carry no credentials: validation refuses them.
        shown.database_url = redact_url(&self.database_url);
        if !shown.storage.tenant_salt.is_empty() {
            shown.storage.tenant_salt = REDACTED.into();
        }
        shown
    }
}

fn redact_url(raw: &str) -> String {
    let Ok(mut url) = url::Url::parse(raw) else {
        // Unparseable: it may still hold a password, so none of it is shown.
        return REDACTED.into();
    };
    if url.password().is_some() {
        let _ = url.set_password(Some(REDACTED));
    }
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(key, _)| (key.into_owned(), REDACTED.to_string()))
        .collect();
    if !pairs.is_empty() {
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_and_query_values_are_replaced_the_rest_is_kept() {
        assert_eq!(
            redact_url("postgres://condenser:hunter2@db:5432/condenser?sslmode=require"),
            "postgres://condenser:REDACTED@db:5432/condenser?sslmode=REDACTED"
        );
        assert_eq!(
            redact_url("https://gw.example/v1?key=AIzaSecret"),
            "https://gw.example/v1?key=REDACTED"
        );
        assert_eq!(redact_url("sqlite://condenser.db"), "sqlite://condenser.db");
        assert_eq!(redact_url("not a url with a p@ssword"), REDACTED);
    }
}
