//! `status` and `logs`: reading operations, from any machine.

use futures::{AsyncBufReadExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use kube::ResourceExt;

use super::args::{LogsArgs, Output, Role, StatusArgs};
use super::{exit, set, CliError};
use crate::cluster::{Cluster, Side};
use crate::driver::incluster;
use crate::record::rehome::Rehome;
use crate::record::store::{group_view, RecordStore, Store};
use crate::record::{print, Attempt, VolumeMigration};
use crate::resources::driver::DRIVER_CONTAINER;

/// Prints one operation as `-o` says (`table`: the detailed view).
pub fn print_one(vm: &VolumeMigration, output: Output) -> Result<(), CliError> {
    let ops = std::slice::from_ref(vm);
    let text = match output {
        Output::Table => print::describe(vm, Timestamp::now()),
        Output::Json => print::to_json(ops, true).map_err(|e| CliError::Print(e.to_string()))?,
        Output::Yaml => print::to_yaml(ops, true).map_err(|e| CliError::Print(e.to_string()))?,
    };
    super::out(&text);
    if !text.ends_with('\n') {
        super::out("\n");
    }
    Ok(())
}

pub async fn status(cluster: &Cluster, args: StatusArgs, output: Output) -> Result<i32, CliError> {
    let client = cluster.client.clone();
    if let Some(op) = &args.operation {
        match set::find(cluster, op).await? {
            set::Found::One(vm) => print_one(&vm, output)?,
            set::Found::Rehome(r) => return super::rehome::status(&r, output),
            set::Found::Set(g) => {
                let view = group_view(&client, *g).await?;
                set::print_set(&view, output)?;
            }
        }
        return Ok(exit::OK);
    }
    let ops = if args.all_namespaces {
        RecordStore::list_all(client).await?
    } else {
        RecordStore::new(client, &cluster.namespace).list().await?
    };
    let sets = set::list_sets(cluster, args.all_namespaces).await?;
    let rehomes: Vec<Rehome> = if args.all_namespaces {
        Store::<Rehome>::list_all(cluster.client.clone()).await?
    } else {
        Store::<Rehome>::new(cluster.client.clone(), &cluster.namespace)
            .list()
            .await?
    };
    let now = Timestamp::now();
    if output == Output::Table {
        for line in super::clusters::elsewhere(cluster, args.all_namespaces).await? {
            say!("{line}");
        }
    }
    let text = match output {
        Output::Table if ops.is_empty() && sets.is_empty() && rehomes.is_empty() => {
            let ns = (!args.all_namespaces).then_some(cluster.namespace.as_str());
            say!("{}", empty_status(ns));
            return Ok(exit::OK);
        }
        Output::Table => {
            let mut text = String::new();
            if !ops.is_empty() || !sets.is_empty() {
                text = print::table_with_sets(&ops, &sets, now, args.all_namespaces);
            }
            if !rehomes.is_empty() {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&print::rehome::table(&rehomes, now, args.all_namespaces));
            }
            text
        }
        Output::Json | Output::Yaml if !sets.is_empty() || !rehomes.is_empty() => {
            let mut items: Vec<serde_json::Value> = sets
                .iter()
                .map(crate::record::print::group::set_object)
                .collect();
            for vm in &ops {
                items.push(serde_json::to_value(vm).map_err(|e| CliError::Print(e.to_string()))?);
            }
            items.extend(rehomes.iter().map(print::rehome::object));
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items,
                "metadata": {"resourceVersion": ""}});
            match output {
                Output::Json => set::json_text(&list)?,
                _ => set::yaml_text(&list)?,
            }
        }
        Output::Json => print::to_json(&ops, false).map_err(|e| CliError::Print(e.to_string()))?,
        Output::Yaml => print::to_yaml(&ops, false).map_err(|e| CliError::Print(e.to_string()))?,
    };
    super::out(&text);
    Ok(exit::OK)
}

/// What `status` says when it finds no operation; in one namespace, it
/// points at `-A`, since operations live in their destination namespace.
fn empty_status(namespace: Option<&str>) -> String {
    let message = print::empty_message(namespace);
    match namespace {
        Some(_) => format!("{message} Every namespace: kubectl volmig status -A"),
        None => message,
    }
}

pub async fn logs(cluster: &Cluster, args: LogsArgs) -> Result<i32, CliError> {
    let vm = match set::find(cluster, &args.operation).await? {
        set::Found::One(vm) => *vm,
        set::Found::Rehome(r) => return Err(super::rehome::refuse(&r, "logs")),
        set::Found::Set(g) => {
            let claims: Vec<String> = g
                .spec
                .claims
                .iter()
                .map(|m| format!("{} ({} -n {})", m.source, m.operation, m.namespace()))
                .collect();
            return Err(CliError::Usage(format!(
                "operation {} is a set of claims; each has its own logs: kubectl volmig logs \
                 <claim's operation> -n <its namespace>, one of: {}",
                args.operation,
                claims.join(", ")
            )));
        }
    };
    if args.driver {
        return driver_logs(cluster, &vm, args.follow).await;
    }
    let attempt = match args.attempt {
        Some(n) => vm.status.attempts.iter().find(|a| a.number == n),
        None => vm.status.attempts.last(),
    }
    .ok_or_else(|| {
        CliError::Usage(format!(
            "operation {} has {} attempt(s){}",
            args.operation,
            vm.status.attempts.len(),
            args.attempt
                .map(|n| format!("; there is no attempt {n}"))
                .unwrap_or_default()
        ))
    })?;
    let roles: &[Role] = match (args.role, args.follow) {
        (Some(r), _) => &[r][..],
        (None, true) => &[Role::Receiver],
        (None, false) => &[Role::Receiver, Role::Sender],
    };
    // Across clusters, the sender's log is in the source's.
    let sides = super::clusters::sides(cluster, &vm.spec).await?;
    for role in roles {
        let (name, ns, side) = match role {
            Role::Receiver => (
                &attempt.receiver.name,
                &vm.spec.destination.namespace,
                Side::Destination,
            ),
            Role::Sender => (
                &attempt.sender.name,
                &vm.spec.source.namespace,
                Side::Source,
            ),
        };
        let header = format!(
            "==> {} {name} (attempt {}) <==\n",
            role_name(*role),
            attempt.number
        );
        if !super::out(&header) {
            break;
        }
        let api: Api<Pod> = Api::namespaced(sides.client(side).clone(), ns);
        if !print_pod_log(&api, name, crate::resources::CONTAINER, args.follow).await? {
            print_recorded(attempt, *role, name);
        }
    }
    Ok(exit::OK)
}

/// The in-cluster driver's log: each pod its Job ran, oldest first (a
/// replaced pod's log says why it stopped); `-f` follows the newest.
async fn driver_logs(
    cluster: &Cluster,
    vm: &VolumeMigration,
    follow: bool,
) -> Result<i32, CliError> {
    let op = &vm.metadata.name;
    let ns = &vm.metadata.namespace;
    let pods = incluster::driver_pods(&cluster.client, ns, op).await?;
    if pods.is_empty() {
        let why = match &vm.status.in_cluster {
            None => {
                "it was never detached (its driver ran in a client: see its output)".to_string()
            }
            Some(ic) => format!(
                "its Job {} has none left (a finished Job goes after 10 minutes)",
                ic.job
            ),
        };
        say!("operation {op} has no driver pod: {why}");
        return Ok(exit::OK);
    }
    let api: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    let last = pods.len() - 1;
    for (i, pod) in pods.iter().enumerate() {
        let name = pod.name_any();
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if !super::out(&format!("==> driver {name} ({phase}) <==\n")) {
            break;
        }
        print_pod_log(&api, &name, DRIVER_CONTAINER, follow && i == last).await?;
    }
    Ok(exit::OK)
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Receiver => "receiver",
        Role::Sender => "sender",
    }
}

/// Prints (or follows) a pod's log; `false` when the pod is gone.
async fn print_pod_log(
    api: &Api<Pod>,
    name: &str,
    container: &str,
    follow: bool,
) -> Result<bool, CliError> {
    let exists = api
        .get_opt(name)
        .await
        .map_err(|e| CliError::kube(format!("get pod {name}"), e))?
        .is_some();
    if !exists {
        return Ok(false);
    }
    let params = LogParams {
        container: Some(container.into()),
        follow,
        ..LogParams::default()
    };
    if follow {
        let stream = api
            .log_stream(name, &params)
            .await
            .map_err(|e| CliError::kube(format!("follow the log of {name}"), e))?;
        let mut lines = stream.lines();
        while let Some(Ok(line)) = lines.next().await {
            if !super::out(&format!("{line}\n")) {
                break;
            }
        }
    } else {
        let text = api
            .logs(name, &params)
            .await
            .map_err(|e| CliError::kube(format!("read the log of {name}"), e))?;
        super::out(&text);
    }
    Ok(true)
}

/// A deleted pod's log: the lines the record kept.
fn print_recorded(attempt: &Attempt, role: Role, name: &str) {
    let prefix = format!("{}: ", role_name(role));
    let lines: Vec<&str> = attempt
        .log_tail
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .collect();
    say!(
        "(pod {name} is gone; the operation record kept its last {} line(s))",
        lines.len()
    );
    for line in lines {
        if !super::out(&format!("{line}\n")) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_operation_in_a_namespace_points_at_every_namespace() {
        assert_eq!(
            empty_status(Some("prod")),
            "No operations found in namespace prod. Every namespace: kubectl volmig status -A"
        );
        assert_eq!(empty_status(None), "No operations found.");
    }
}
