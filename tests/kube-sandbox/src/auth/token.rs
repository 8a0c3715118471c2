//! Service-account tokens: JWTs signed with ES256 (ECDSA P-256, one of the
//! algorithms kube-apiserver's `--service-account-key-file` takes), with
//! the claims of a bound token as `pkg/serviceaccount/claims.go` writes them
//! (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf`, `jti` and the
//! `kubernetes.io` claim naming the namespace, ServiceAccount, pod and node).

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
    pub pod: String,
    pub pod_uid: String,
    pub node: String,
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

    /// A token for `subject`, issued at `now` (Unix seconds).
    pub fn issue(&self, subject: &Subject, now: u64) -> Result<String, TokenError> {
        let header = json!({"alg": "ES256", "kid": self.key_id()});
        let claims = json!({
            "aud": [ISSUER],
            "exp": now + LIFETIME_SECONDS,
            "iat": now,
            "nbf": now,
            "iss": ISSUER,
            "jti": crate::store::new_uid(),
            "sub": format!("system:serviceaccount:{}:{}", subject.namespace, subject.service_account),
            "kubernetes.io": {
                "namespace": subject.namespace,
                "node": {"name": subject.node},
                "pod": {"name": subject.pod, "uid": subject.pod_uid},
                "serviceaccount": {"name": subject.service_account, "uid": subject.service_account_uid},
                "warnafter": now + REQUESTED_SECONDS,
            },
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
        let token = signer.issue(&subject(), 1_000).expect("token");
        assert_eq!(signer.verify(&token, 1_001).expect("valid"), subject());
        let claims = decode(token.split('.').nth(1).expect("claims")).expect("json");
        assert_eq!(claims["sub"], "system:serviceaccount:ns:driver");
        assert_eq!(claims["kubernetes.io"]["pod"]["uid"], "pod-uid");
        assert_eq!(claims["exp"], 1_000 + LIFETIME_SECONDS);
    }

    #[test]
    fn forged_expired_and_foreign_tokens_are_refused() {
        let signer = Signer::generate().expect("key");
        let token = signer.issue(&subject(), 1_000).expect("token");
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
}
