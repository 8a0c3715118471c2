//! Operations across clusters (`migrate --to-context`), from the command
//! line: reaching the destination's cluster, the source's cluster of a
//! record that names one, and a record from the source's context.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::args::{Command, MigrateOptions};
use super::CliError;
use crate::cluster::{self, Cluster, ClusterArgs, Sides};
use crate::names;
use crate::resources;
use crate::spec::{ClusterRef, Clusters, MigrationSpec};

/// The destination's cluster of `migrate --to-context`, in `namespace`;
/// `None` without the flag.
pub async fn destination(
    source: &Cluster,
    args: &MigrateOptions,
    namespace: &str,
) -> Result<Option<Cluster>, CliError> {
    let Some(context) = &args.to_context else {
        return Ok(None);
    };
    let there = cluster::connect(&ClusterArgs {
        kubeconfig: args.to_kubeconfig.clone().or(source.kubeconfig.clone()),
        context: Some(context.clone()),
        namespace: Some(namespace.to_string()),
    })
    .await?;
    if there.server == source.server {
        return Err(CliError::Usage(format!(
            "--to-context {context} is the source's cluster ({}): leave --to-context out to \
             copy within one cluster",
            source.server
        )));
    }
    Ok(Some(there))
}

/// `--detach` of a copy into another cluster, refused by `migrate` and
/// `resume`.
pub fn no_detach() -> CliError {
    CliError::Usage(
        "--detach does not drive a copy into another cluster in this version: its driver pod \
         would need credentials for the source's cluster; drive it from here"
            .into(),
    )
}

/// The two clusters as the record names them.
pub fn clusters(
    source: &Cluster,
    destination: &Cluster,
    args: &MigrateOptions,
) -> Result<Clusters, CliError> {
    let no_context = || {
        CliError::Usage(
            "--to-context needs both clusters from kubeconfig contexts, so that other clients \
             find them again (not the in-cluster service account)"
                .into(),
        )
    };
    Ok(Clusters {
        source: source.reference().ok_or_else(no_context)?,
        destination: destination.reference().ok_or_else(no_context)?,
        network: args.network,
    })
}

/// The clients of an operation whose record is in `cluster`.
pub async fn sides(cluster: &Cluster, spec: &MigrationSpec) -> Result<Sides, CliError> {
    let kubeconfig = cluster.kubeconfig.as_deref();
    Sides::of_record(&cluster.client, kubeconfig, spec)
        .await
        .map_err(|e| match &spec.clusters {
            Some(c) => unreachable_cluster(&c.source, &e),
            None => e.into(),
        })
}

fn unreachable_cluster(to: &ClusterRef, e: &dyn std::fmt::Display) -> CliError {
    CliError::Usage(format!(
        "cannot reach the operation's other cluster, {to}: {e} (the record names it by its \
         kubeconfig context)"
    ))
}

/// The operation a command names, if it names one.
pub fn operation_of(command: &Command) -> Option<&str> {
    match command {
        Command::Status(a) => a.operation.as_deref(),
        Command::Logs(a) => Some(&a.operation),
        Command::Resume(a) => Some(&a.operation),
        Command::Sync(a) => Some(&a.operation),
        Command::Abort(a) => Some(&a.operation),
        Command::Cleanup(a) => Some(&a.operation),
        Command::Monitor(a) => a.operation.as_deref(),
        _ => None,
    }
}

/// The cluster with `op`'s record: `cluster` itself, or, given the source's
/// context of a cross-cluster operation, the destination's, where its
/// pointer says.
pub async fn with_record(cluster: Cluster, op: &str) -> Result<Cluster, CliError> {
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let record = maps
        .get_metadata_opt(&names::record_name(op))
        .await
        .map_err(|e| CliError::kube(format!("get the record of {op}"), e))?;
    if record.is_some() {
        return Ok(cluster);
    }
    let pointer = maps
        .get_opt(&names::pointer_name(op))
        .await
        .map_err(|e| CliError::kube(format!("get the record pointer of {op}"), e))?;
    let Some(location) = pointer.as_ref().and_then(resources::read_pointer) else {
        return Ok(cluster);
    };
    tracing::info!(
        "operation {op}'s record is in {}, namespace {}",
        location.cluster,
        location.namespace
    );
    let kubeconfig = cluster.kubeconfig.as_deref();
    cluster::connect_to(&location.cluster, kubeconfig, &location.namespace)
        .await
        .map_err(|e| unreachable_cluster(&location.cluster, &e))
}

/// The operations of `cluster`'s namespace (every namespace with `all`)
/// whose record is in another cluster, each with where it is, in words:
/// `data-x7k2p: into another cluster; its record is in context dst,
/// namespace default`.
pub async fn elsewhere(cluster: &Cluster, all: bool) -> Result<Vec<String>, CliError> {
    let api: Api<ConfigMap> = match all {
        true => Api::all(cluster.client.clone()),
        false => Api::namespaced(cluster.client.clone(), &cluster.namespace),
    };
    let selector = names::component_selector(names::Component::RecordPointer);
    let list = api
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .map_err(|e| CliError::kube("list record pointers", e))?;
    let mut lines: Vec<String> = list
        .items
        .iter()
        .filter_map(|pointer| {
            let at = resources::read_pointer(pointer)?;
            let labels = pointer.metadata.labels.as_ref()?;
            let op = labels.get(names::OPERATION_KEY)?;
            Some(format!(
                "{op}: into another cluster; its record is in {}, namespace {} \
                 (kubectl volmig status {op} finds it from here)",
                at.cluster, at.namespace
            ))
        })
        .collect();
    lines.sort();
    Ok(lines)
}
