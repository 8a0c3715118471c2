//! Service-account tokens: JWTs signed with ES256 (ECDSA P-256, one of the
//! algorithms kube-apiserver's `--service-account-key-file` takes), with
//! the claims `pkg/serviceaccount/claims.go` writes (`iss`, `sub`, `aud`,
//! `exp`, `iat`, `nbf`, `jti` and the `kubernetes.io` claim naming the
//! namespace and ServiceAccount, and for a token bound to a pod the pod
//! and its node).

use base64::prelude::{Engine as _, BASE64_URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, UnparsedPublicKey};
use serde_json::{json, Value};

/// The issuer and audience of the tokens: kube-apiserver's default
/// `--service-account-issuer` on kubeadm clusters.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// How long a token lives. The kubelet asks for 3607 s and kube-apiserver
/// extends such a request to a year (`--service-account-extend-token-
/// expiration`, on by default), warning after the asked expiry; the
/// sandbox's kubelet never refreshes a projected token, so the extended
/// lifetime is the one that matters.
pub const LIFETIME_SECONDS: u64 = 365 * 24 * 3600;
/// What the kubelet asks for (`expirationSeconds` of the injected volume).
pub const REQUESTED_SECONDS: u64 = 3607;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot make the service-account signing key")]
    Key,
    #[error("cannot sign a token")]
    Sign,
    #[error("not a JWT")]
    Malformed,
    #[error("invalid signature")]
    Signature,
    #[error("token has expired or is not yet valid")]
    Expired,
    #[error("token is for another issuer or audience")]
    Audience,
}

/// Whom a token is for: the `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub namespace: String,
    pub service_account: String,
    pub service_account_uid: String,
    /// The pod the token is bound to; empty (as `pod_uid` and `node`) for
    /// a token that is not, such as `kubectl create token` asks for.
    pub pod: String,
    pub pod_uid: String,
    pub node: String,
}

impl Subject {
    /// Whether the token is bound to a pod (and lives only as long as it).
    pub fn is_pod_bound(&self) -> bool {
        !self.pod.is_empty()
    }
}

/// For whom and how long a token is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validity {
    /// `aud`; only tokens for [`ISSUER`] authenticate to the API server.
    pub audiences: Vec<String>,
    pub seconds: u64,
    /// `warnafter`: when the holder should have asked for a new one.
    pub warn_after_seconds: Option<u64>,
}

impl Validity {
    /// The kubelet's projected token: asked for [`REQUESTED_SECONDS`],
    /// extended to [`LIFETIME_SECONDS`].
    pub fn projected() -> Validity {
        Validity {
            audiences: vec![ISSUER.to_string()],
            seconds: LIFETIME_SECONDS,
            warn_after_seconds: Some(REQUESTED_SECONDS),
        }
    }
}

/// Signs and verifies tokens with a key made at start.
pub struct Signer {
    key: EcdsaKeyPair,
    rng: SystemRandom,
}

impl Signer {
    pub fn generate() -> Result<Signer, TokenError> {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).map_err(|_| TokenError::Key)?;
        let key =
            EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).map_err(|_| TokenError::Key)?;
        Ok(Signer { key, rng })
    }

    /// A token for `subject`, issued at `now` (Unix seconds), valid as
    /// `validity` says: it expires at `now + validity.seconds`.
    pub fn issue(
        &self,
        subject: &Subject,
        now: u64,
        validity: &Validity,
    ) -> Result<String, TokenError> {
        let header = json!({"alg": "ES256", "kid": self.key_id()});
        let mut k8s = json!({
            "namespace": subject.namespace,
            "serviceaccount": {"name": subject.service_account, "uid": subject.service_account_uid},
        });
        if subject.is_pod_bound() {
            k8s["pod"] = json!({"name": subject.pod, "uid": subject.pod_uid});
            k8s["node"] = json!({"name": subject.node});
        }
        if let Some(warn) = validity.warn_after_seconds {
            k8s["warnafter"] = json!(now + warn);
        }
        let claims = json!({
            "aud": validity.audiences,
            "exp": now + validity.seconds,
            "iat": now,
            "nbf": now,
            "iss": ISSUER,
            "jti": crate::store::new_uid(),
            "sub": format!("system:serviceaccount:{}:{}", subject.namespace, subject.service_account),
            "kubernetes.io": k8s,
        });
        let signed = format!("{}.{}", encode(&header), encode(&claims));
        let signature = self
            .key
            .sign(&self.rng, signed.as_bytes())
            .map_err(|_| TokenError::Sign)?;
        Ok(format!(
            "{signed}.{}",
            BASE64_URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }

    /// The subject of a token this signer issued, valid at `now`.
    pub fn verify(&self, token: &str, now: u64) -> Result<Subject, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(claims), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let signature = BASE64_URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Malformed)?;
        let public = UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        );
        let signed = &token[..header.len() + 1 + claims.len()];
        public
            .verify(signed.as_bytes(), &signature)
            .map_err(|_| TokenError::Signature)?;
        let claims = decode(claims)?;
        let number = |field: &str| claims[field].as_u64().ok_or(TokenError::Malformed);
        if number("exp")? <= now || number("nbf")? > now {
            return Err(TokenError::Expired);
        }
        if claims["iss"] != ISSUER
            || !claims["aud"]
                .as_array()
                .is_some_and(|a| a.contains(&json!(ISSUER)))
        {
            return Err(TokenError::Audience);
        }
        let k8s = &claims["kubernetes.io"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        Ok(Subject {
            namespace: text(&k8s["namespace"]),
            service_account: text(&k8s["serviceaccount"]["name"]),
            service_account_uid: text(&k8s["serviceaccount"]["uid"]),
            pod: text(&k8s["pod"]["name"]),
            pod_uid: text(&k8s["pod"]["uid"]),
            node: text(&k8s["node"]["name"]),
        })
    }

    /// The key's id: the hash of its public key, as kube-apiserver derives
    /// `kid` from the key's public part.
    fn key_id(&self) -> String {
        let hash = blake3::hash(self.key.public_key().as_ref());
        BASE64_URL_SAFE_NO_PAD.encode(&hash.as_bytes()[..16])
    }
}

fn encode(value: &Value) -> String {
    BASE64_URL_SAFE_NO_PAD.encode(value.to_string())
}

fn decode(part: &str) -> Result<Value, TokenError> {
    let bytes = BASE64_URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Subject {
        Subject {
            namespace: "ns".into(),
            service_account: "driver".into(),
            service_account_uid: "sa-uid".into(),
            pod: "p".into(),
            pod_uid: "pod-uid".into(),
            node: "node-1".into(),
        }
    }

    #[test]
    fn a_token_verifies_to_its_subject_with_the_claims_of_a_bound_token() {
        let signer = Signer::generate().expect("key");
        let token = signer
            .issue(&subject(), 1_000, &Validity::projected())
            .expect("token");
        assert_eq!(signer.verify(&token, 1_001).expect("valid"), subject());
        let claims = decode(token.split('.').nth(1).expect("claims")).expect("json");
        assert_eq!(claims["sub"], "system:serviceaccount:ns:driver");
        assert_eq!(claims["kubernetes.io"]["pod"]["uid"], "pod-uid");
        assert_eq!(claims["exp"], 1_000 + LIFETIME_SECONDS);
    }

    #[test]
    fn forged_expired_and_foreign_tokens_are_refused() {
        let signer = Signer::generate().expect("key");
        let token = signer
            .issue(&subject(), 1_000, &Validity::projected())
            .expect("token");
        let other = Signer::generate().expect("key");
        assert!(matches!(
            other.verify(&token, 1_001),
            Err(TokenError::Signature)
        ));
        let expired = 1_000 + LIFETIME_SECONDS;
        assert!(matches!(
            signer.verify(&token, expired),
            Err(TokenError::Expired)
        ));
        // Claims edited after signing: the signature no longer matches.
        let mut parts: Vec<String> = token.split('.').map(String::from).collect();
        let mut claims = decode(&parts[1]).expect("json");
        claims["kubernetes.io"]["serviceaccount"]["name"] = json!("admin");
        parts[1] = encode(&claims);
        assert!(matches!(
            signer.verify(&parts.join("."), 1_001),
            Err(TokenError::Signature)
        ));
        assert!(matches!(
            signer.verify("abc", 1_001),
            Err(TokenError::Malformed)
        ));
    }

    #[test]
    fn an_unbound_token_names_no_pod_and_one_for_another_audience_is_refused() {
        let signer = Signer::generate().expect("key");
        let unbound = Subject {
            pod: String::new(),
            pod_uid: String::new(),
            node: String::new(),
            ..subject()
        };
        let validity = Validity {
            audiences: vec![ISSUER.into()],
            seconds: 600,
            warn_after_seconds: None,
        };
        let token = signer.issue(&unbound, 1_000, &validity).expect("token");
        let claims = decode(token.split('.').nth(1).expect("claims")).expect("json");
        assert_eq!(claims["exp"], 1_600);
        assert!(
            claims["kubernetes.io"]["pod"].is_null()
                && claims["kubernetes.io"]["warnafter"].is_null()
        );
        let seen = signer.verify(&token, 1_001).expect("valid");
        assert!(!seen.is_pod_bound());
        assert!(matches!(
            signer.verify(&token, 1_600),
            Err(TokenError::Expired)
        ));
        let vault = Validity {
            audiences: vec!["vault".into()],
            ..validity
        };
        let token = signer.issue(&unbound, 1_000, &vault).expect("token");
        assert!(matches!(
            signer.verify(&token, 1_001),
            Err(TokenError::Audience)
        ));
    }
}
