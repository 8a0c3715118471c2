//! Authentication: who a request comes from. The kubeconfig the sandbox
//! writes carries a bearer token for the cluster admin (`system:masters`);
//! pods carry service-account tokens ([`token`]) that the kubelet writes
//! into their projected `kube-api-access-*` volume; a request without
//! credentials is `system:anonymous`. Authorization ([`rbac`]) restricts
//! service-account identities only: the admin and anonymous requests may do
//! everything. The identity is recorded with each request
//! ([`crate::api::AuditEntry`]).
//!
//! As kube-apiserver's token authenticators do
//! (pkg/serviceaccount/jwt.go, pkg/serviceaccount/legacy.go `Validate`): a
//! service-account token authenticates only while its signature, issuer,
//! audience and expiry hold and its ServiceAccount and pod still exist with
//! the uids it names.

pub mod escalation;
pub mod pki;
pub mod policy;
pub mod rbac;
pub mod token;

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::registry;
use crate::status::ApiError;
use crate::store::Store;
pub use pki::{ClusterCa, PkiError};
pub use token::{Signer, Subject, TokenError, Validity};

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The kubeconfig's user: `kubernetes-admin` in `system:masters`.
    Admin,
    /// A pod's service-account token.
    ServiceAccount(Subject),
    /// No credentials.
    Anonymous,
}

/// The admin's user name, as kubeadm's `admin.conf` names it.
pub const ADMIN_USER: &str = "kubernetes-admin";

impl Identity {
    /// The user name, as `kubectl auth whoami` prints it.
    pub fn username(&self) -> String {
        match self {
            Identity::Admin => ADMIN_USER.to_string(),
            Identity::ServiceAccount(s) => {
                format!(
                    "system:serviceaccount:{}:{}",
                    s.namespace, s.service_account
                )
            }
            Identity::Anonymous => "system:anonymous".to_string(),
        }
    }

    /// Whether RBAC decides what this identity may do: service accounts
    /// only (the admin is `system:masters`; anonymous requests are not
    /// restricted by the sandbox).
    pub fn is_rbac_enforced(&self) -> bool {
        matches!(self, Identity::ServiceAccount(_))
    }

    /// The groups, as the authenticators add them
    /// (`serviceaccount.MakeGroupNames` for service accounts).
    pub fn groups(&self) -> Vec<String> {
        match self {
            Identity::Admin => vec!["system:masters".into(), "system:authenticated".into()],
            Identity::ServiceAccount(s) => vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", s.namespace),
                "system:authenticated".into(),
            ],
            Identity::Anonymous => vec!["system:unauthenticated".into()],
        }
    }
}

/// The cluster's credentials: its CA, the token signer and the admin token.
pub struct Authority {
    pub ca: ClusterCa,
    pub signer: Signer,
    admin_token: String,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    Token(#[from] TokenError),
}

impl Authority {
    /// New credentials; `service_ip` is the `kubernetes` Service's
    /// ClusterIP, which the serving certificate names.
    pub fn generate(service_ip: IpAddr) -> Result<Authority, AuthorityError> {
        Ok(Authority {
            ca: ClusterCa::generate(service_ip)?,
            signer: Signer::generate()?,
            admin_token: format!("sandbox-admin.{}", crate::store::new_uid()),
        })
    }

    /// The bearer token the kubeconfig carries.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The identity of a request with this `Authorization` header; 401 for
    /// credentials that do not authenticate.
    pub fn authenticate(
        &self,
        store: &Store,
        authorization: Option<&str>,
    ) -> Result<Identity, ApiError> {
        let Some(header) = authorization else {
            return Ok(Identity::Anonymous);
        };
        let Some(token) = header.strip_prefix("Bearer ").map(str::trim) else {
            tracing::debug!("refused credentials: only bearer tokens are accepted");
            return Err(ApiError::Unauthorized);
        };
        if token == self.admin_token {
            return Ok(Identity::Admin);
        }
        let subject = self.signer.verify(token, unix_now()).map_err(|e| {
            tracing::debug!("refused token: {e}");
            ApiError::Unauthorized
        })?;
        let alive = |plural: &str, name: &str, uid: &str| {
            store
                .get(registry::get(plural), &subject.namespace, name)
                .is_ok_and(|o| o["metadata"]["uid"] == uid)
        };
        let pod_alive = || !subject.is_pod_bound() || alive("pods", &subject.pod, &subject.pod_uid);
        if !alive(
            "serviceaccounts",
            &subject.service_account,
            &subject.service_account_uid,
        ) || !pod_alive()
        {
            tracing::debug!("refused token: its service account or pod is gone");
            return Err(ApiError::Unauthorized);
        }
        Ok(Identity::ServiceAccount(subject))
    }

    /// A token for `subject` valid from now as `validity` says, as the
    /// TokenRequest API issues one; with when it expires (Unix seconds).
    pub fn issue(
        &self,
        subject: &Subject,
        validity: &Validity,
    ) -> Result<(String, u64), TokenError> {
        let now = unix_now();
        let token = self.signer.issue(subject, now, validity)?;
        Ok((token, now + validity.seconds))
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
