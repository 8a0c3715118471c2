//! The kube client, configured as kubectl's global flags say.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub mod resolve;
mod sides;

pub use sides::{Side, Sides};

/// kubectl's connection flags.
#[derive(Debug, Clone, Default)]
pub struct ClusterArgs {
    /// `--kubeconfig`: else `$KUBECONFIG`, else `~/.kube/config`, else the
    /// in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`: else the kubeconfig's current context.
    pub context: Option<String>,
    /// `-n`: else the context's namespace, else `default`.
    pub namespace: Option<String>,
}

/// A connected client and the namespace commands default to.
#[derive(Clone)]
pub struct Cluster {
    pub client: Client,
    pub namespace: String,
    /// The kubeconfig context's user, when a kubeconfig names one (not
    /// with the in-cluster service account).
    pub user: Option<String>,
    /// The kubeconfig context, when one was used (not in a pod).
    pub context: Option<String>,
    /// The kubeconfig file a flag named, if one did.
    pub kubeconfig: Option<PathBuf>,
    /// The API server's URL.
    pub server: String,
}

impl Cluster {
    /// This cluster as a record names it: by context. In a pod (no
    /// kubeconfig) there is no context to name.
    pub fn reference(&self) -> Option<crate::spec::ClusterRef> {
        Some(crate::spec::ClusterRef {
            context: self.context.clone()?,
            kubeconfig: self.kubeconfig.as_ref().map(|p| p.display().to_string()),
            server: self.server.clone(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("invalid kubeconfig: {0}")]
    Config(#[from] kube::config::KubeconfigError),
    #[error("no cluster configured: {0} (pass --kubeconfig, or set KUBECONFIG)")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("cannot create the Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("cannot resolve the API server's name {host:?}: {message}")]
    Resolve { host: String, message: String },
}

impl ClusterError {
    /// A configuration problem does not fix itself; a name that does not
    /// resolve may once DNS answers.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ClusterError::Resolve { .. })
    }
}

/// Connects as kubectl would with the same flags.
pub async fn connect(args: &ClusterArgs) -> Result<Cluster, ClusterError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ClusterError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
            Config::from_custom_kubeconfig(file, &options).await?
        }
        (None, Some(_)) => Config::from_kubeconfig(&options).await?,
        (None, None) => Config::infer().await?,
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let server = config.cluster_url.to_string();
    #[cfg(all(target_os = "linux", target_feature = "crt-static"))]
    let config = resolve::in_rust(config).await?;
    let client = Client::try_from(config)?;
    let (context, user) = kubeconfig_context(args).unzip();
    Ok(Cluster {
        client,
        namespace,
        user: user.flatten(),
        context,
        kubeconfig: args.kubeconfig.clone(),
        server,
    })
}

/// Connects to the cluster `cluster` names, in `namespace`: by its
/// context, in the kubeconfig file it names, else in `kubeconfig` (the
/// file this client was given), else in the default one.
pub async fn connect_to(
    cluster: &crate::spec::ClusterRef,
    kubeconfig: Option<&Path>,
    namespace: &str,
) -> Result<Cluster, ClusterError> {
    let file = cluster.kubeconfig.as_ref().map(PathBuf::from);
    connect(&ClusterArgs {
        kubeconfig: file.or(kubeconfig.map(Path::to_path_buf)),
        context: Some(cluster.context.clone()),
        namespace: Some(namespace.to_string()),
    })
    .await
}

/// The context the flags select, and its user, as the kubeconfig names
/// them; none without a kubeconfig (in a pod).
fn kubeconfig_context(args: &ClusterArgs) -> Option<(String, Option<String>)> {
    let file = match &args.kubeconfig {
        Some(path) => Kubeconfig::read_from(path).ok()?,
        None => Kubeconfig::read().ok()?,
    };
    let name = args.context.clone().or(file.current_context.clone())?;
    let context = file.contexts.iter().find(|c| c.name == name)?;
    let user = context.context.as_ref().and_then(|c| c.user.clone());
    Some((name, user))
}

/// What the API server said, in words: an API error's message (what
/// kubectl prints), else the client error. kube's own `Display` of an API
/// error appends the whole Status in Debug form.
pub fn kube_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => {
            let advice = match status.code {
                403 if status.message.contains("PodSecurity") => {
                    "; --security restricted runs the movers as the app's own user with no \
                     capability, which that level admits (see docs/security.md)"
                }
                403 => "; ask for the permissions listed in docs/kubectl-volmig.md",
                _ => "",
            };
            format!("{}{advice}", status.message)
        }
        other => other.to_string(),
    }
}

/// Whether the API server lets this client do what `attributes` say (a
/// SelfSubjectAccessReview, what `kubectl auth can-i` asks).
pub async fn can_i(
    client: &kube::Client,
    attributes: k8s_openapi::api::authorization::v1::ResourceAttributes,
) -> Result<bool, kube::Error> {
    use k8s_openapi::api::authorization::v1::{
        SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let reviews: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
    let asked = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(attributes),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = reviews
        .create(&kube::api::PostParams::default(), &asked)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}
