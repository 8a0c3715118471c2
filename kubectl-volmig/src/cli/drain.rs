//! `kubectl volmig drain NODE`: every claim whose volume is pinned to NODE
//! moved off it, apps included: `migrate --from-node NODE --cutover`, one
//! operation of several claims (one stop of each workload), onto
//! `--to-node N2` (the same node-local classes, made there) or
//! `--to-storage-class SC`.

use super::args::{ClaimArgs, DrainArgs, MigrateArgs, Output};
use super::CliError;
use crate::cluster::Cluster;

pub async fn run(cluster: &Cluster, args: DrainArgs, output: Output) -> Result<i32, CliError> {
    let DrainArgs { node, mut options } = args;
    if options.to_context.is_some() {
        return Err(CliError::Usage(format!(
            "drain {node} moves apps onto new volumes in their own cluster: --to-context cannot \
             go with it"
        )));
    }
    if options.to_node.is_none() && options.to_storage_class.is_none() {
        return Err(CliError::Usage(format!(
            "drain {node} needs where to: --to-node NODE (the volumes are made again there, in \
             their classes) or --to-storage-class SC"
        )));
    }
    if options.to_node.as_deref() == Some(node.as_str()) {
        return Err(CliError::Usage(format!(
            "--to-node {node} is the node being drained: choose another"
        )));
    }
    options.cutover = true;
    let claims = ClaimArgs {
        from_node: Some(node),
        ..ClaimArgs::default()
    };
    super::many::run(cluster, MigrateArgs { claims, options }, output).await
}
