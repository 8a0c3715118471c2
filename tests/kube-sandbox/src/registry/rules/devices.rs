//! A container's `volumeDevices` against its pod's volumes and its own
//! `volumeMounts`, as `ValidateVolumeMounts` and `ValidateVolumeDevices`
//! (pkg/apis/core/validation) check them, with their messages.

use serde_json::Value;

use super::metadata::invalid_value;

/// The causes for container `c` at `path` (`spec.containers[0]`) of a pod
/// whose volumes are `volumes`: first its mounts' clashes with its
/// devices, then each device's problems.
pub(super) fn container_causes(path: &str, c: &Value, volumes: &[Value]) -> Vec<String> {
    let list = |field: &str| -> Vec<(&str, &str, usize)> {
        c[field]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, m)| {
                let at = if field == "volumeMounts" {
                    "mountPath"
                } else {
                    "devicePath"
                };
                (
                    m["name"].as_str().unwrap_or_default(),
                    m[at].as_str().unwrap_or_default(),
                    i,
                )
            })
            .collect()
    };
    let (mounts, devices) = (list("volumeMounts"), list("volumeDevices"));
    let mut causes = Vec::new();
    for (name, mount_path, j) in &mounts {
        let at = format!("{path}.volumeMounts[{j}]");
        if devices.iter().any(|(n, _, _)| n == name) {
            let detail = "must not already exist in volumeDevices";
            causes.push(invalid_value(&format!("{at}.name"), name, detail));
        }
        if devices.iter().any(|(_, p, _)| p == mount_path) {
            let detail = "must not already exist as a path in volumeDevices";
            causes.push(invalid_value(
                &format!("{at}.mountPath"),
                mount_path,
                detail,
            ));
        }
    }
    let (mut names, mut paths): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    for (name, device_path, j) in &devices {
        let at = format!("{path}.volumeDevices[{j}]");
        let (name_at, path_at) = (format!("{at}.name"), format!("{at}.devicePath"));
        let source = volumes.iter().find(|v| v["name"] == *name);
        if name.is_empty() {
            causes.push(format!("{name_at}: Required value"));
        }
        if names.contains(name) {
            causes.push(invalid_value(&name_at, name, "must be unique"));
        }
        match source {
            Some(v) if v["persistentVolumeClaim"].is_object() || v["ephemeral"].is_object() => {}
            Some(_) => causes.push(invalid_value(
                &name_at,
                name,
                "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode",
            )),
            None => causes.push(format!("{name_at}: Not found: {name:?}")),
        }
        if device_path.is_empty() {
            causes.push(format!("{path_at}: Required value"));
        }
        if paths.contains(device_path) {
            causes.push(invalid_value(&path_at, device_path, "must be unique"));
        }
        if !device_path.is_empty() && device_path.split('/').any(|part| part == "..") {
            let detail = "can not contain backsteps ('..')";
            causes.push(invalid_value(&path_at, device_path, detail));
        } else {
            paths.push(device_path);
        }
        if mounts.iter().any(|(n, _, _)| n == name) {
            let detail = "must not already exist in volumeMounts";
            causes.push(invalid_value(&name_at, name, detail));
        }
        if mounts.iter().any(|(_, p, _)| p == device_path) {
            let detail = "must not already exist as a path in volumeMounts";
            causes.push(invalid_value(&path_at, device_path, detail));
        }
        if !name.is_empty() {
            names.push(name);
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn devices_are_checked_as_validate_volume_devices_does() {
        let volumes = [
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}),
            json!({"name": "scratch", "emptyDir": {}}),
        ];
        let c = json!({
            "volumeMounts": [{"name": "scratch", "mountPath": "/dev/xvda"}],
            "volumeDevices": [
                {"name": "data", "devicePath": "/dev/xvda"},
                {"name": "data", "devicePath": "/dev/../xvdb"},
                {"name": "scratch", "devicePath": ""},
                {"name": "nope", "devicePath": "/dev/xvdc"},
            ],
        });
        let causes = container_causes("spec.containers[0]", &c, &volumes);
        let d = "spec.containers[0].volumeDevices";
        assert_eq!(
            causes,
            vec![
                "spec.containers[0].volumeMounts[0].name: Invalid value: \"scratch\": must not already exist in volumeDevices".to_string(),
                "spec.containers[0].volumeMounts[0].mountPath: Invalid value: \"/dev/xvda\": must not already exist as a path in volumeDevices".into(),
                format!("{d}[0].devicePath: Invalid value: \"/dev/xvda\": must not already exist as a path in volumeMounts"),
                format!("{d}[1].name: Invalid value: \"data\": must be unique"),
                format!("{d}[1].devicePath: Invalid value: \"/dev/../xvdb\": can not contain backsteps ('..')"),
                format!("{d}[2].name: Invalid value: \"scratch\": can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode"),
                format!("{d}[2].devicePath: Required value"),
                format!("{d}[2].name: Invalid value: \"scratch\": must not already exist in volumeMounts"),
                format!("{d}[3].name: Not found: \"nope\""),
            ]
        );
    }
}
