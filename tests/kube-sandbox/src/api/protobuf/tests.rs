//! Decoding bodies kubectl 1.33 sent (`fixtures/`, captured once from
//! `kubectl create ...` against the sandbox), and a Pod built with the
//! schemas, into the JSON the store keeps.

use prost_reflect::{DynamicMessage, Value as Field};
use serde_json::json;

use super::*;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/src/api/protobuf/fixtures/{name}.pb",
        env!("CARGO_MANIFEST_DIR")
    );
    let body = std::fs::read(&path).expect("fixture");
    decode(&body).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn kubectl_create_namespace_and_serviceaccount() {
    assert_eq!(
        fixture("namespace"),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo", "creationTimestamp": null}, "spec": {}, "status": {}})
    );
    assert_eq!(
        fixture("serviceaccount"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "creationTimestamp": null}})
    );
}

#[test]
fn kubectl_create_secret_and_configmap() {
    // `kubectl create secret generic creds --from-literal=user=admin --from-literal=pass=s3cr=t`
    let secret = fixture("secret");
    assert_eq!(
        secret["data"],
        json!({"user": "YWRtaW4=", "pass": "czNjcj10"})
    );
    assert_eq!(
        secret["metadata"],
        json!({"name": "creds", "creationTimestamp": null})
    );
    // `kubectl create configmap settings --from-literal=mode=fast --from-literal=level=3`
    let configmap = fixture("configmap");
    assert_eq!(configmap["data"], json!({"mode": "fast", "level": "3"}));
    assert_eq!(configmap["kind"], "ConfigMap");
}

#[test]
fn kubectl_create_deployment_and_service() {
    // `kubectl create deployment web --image=busybox --replicas=2 --port=80`
    let deployment = fixture("deployment");
    assert_eq!(deployment["apiVersion"], "apps/v1");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "busybox");
    assert_eq!(container["ports"], json!([{"containerPort": 80}]));
    assert_eq!(container["resources"], json!({}));
    let template = &deployment["spec"]["template"]["metadata"];
    assert_eq!(
        template.get("creationTimestamp"),
        Some(&Value::Null),
        "a zero time, as Go writes it"
    );
    // `kubectl create service clusterip web --tcp=80:8080`
    let service = fixture("service");
    let port = &service["spec"]["ports"][0];
    assert_eq!(port["port"], 80);
    assert_eq!(port["targetPort"], 8080, "an IntOrString int");
    assert_eq!(port["name"], "80-8080");
    assert_eq!(service["spec"]["type"], "ClusterIP");
}

/// Sets `name` of `message` to `value`.
fn set(message: &mut DynamicMessage, name: &str, value: Field) {
    message.set_field_by_name(name, value);
}

fn message(name: &str) -> DynamicMessage {
    DynamicMessage::new(pool().get_message_by_name(name).expect(name))
}

#[test]
fn a_pod_with_times_quantities_and_int_or_strings() {
    let core = "k8s.io.api.core.v1";
    let meta = "k8s.io.apimachinery.pkg.apis.meta.v1";
    let mut created = message(&format!("{meta}.Time"));
    set(&mut created, "seconds", Field::I64(1_700_000_000));
    let mut metadata = message(&format!("{meta}.ObjectMeta"));
    set(&mut metadata, "name", Field::String("p".into()));
    set(&mut metadata, "creationTimestamp", Field::Message(created));
    let mut quantity = message("k8s.io.apimachinery.pkg.api.resource.Quantity");
    set(&mut quantity, "string", Field::String("500m".into()));
    let mut resources = message(&format!("{core}.ResourceRequirements"));
    let limits = [(
        prost_reflect::MapKey::String("cpu".into()),
        Field::Message(quantity),
    )];
    set(
        &mut resources,
        "limits",
        Field::Map(limits.into_iter().collect()),
    );
    let mut port = message("k8s.io.apimachinery.pkg.util.intstr.IntOrString");
    set(&mut port, "type", Field::I64(1));
    set(&mut port, "strVal", Field::String("http".into()));
    let mut tcp = message(&format!("{core}.TCPSocketAction"));
    set(&mut tcp, "port", Field::Message(port));
    let mut handler = message(&format!("{core}.ProbeHandler"));
    set(&mut handler, "tcpSocket", Field::Message(tcp));
    let mut probe = message(&format!("{core}.Probe"));
    set(&mut probe, "handler", Field::Message(handler));
    let mut container = message(&format!("{core}.Container"));
    set(&mut container, "name", Field::String("main".into()));
    set(&mut container, "image", Field::String("busybox".into()));
    let command = vec![Field::String("sleep".into()), Field::String("1".into())];
    set(&mut container, "command", Field::List(command));
    set(&mut container, "resources", Field::Message(resources));
    set(&mut container, "readinessProbe", Field::Message(probe));
    let mut volume_source = message(&format!("{core}.VolumeSource"));
    set(
        &mut volume_source,
        "emptyDir",
        Field::Message(message(&format!("{core}.EmptyDirVolumeSource"))),
    );
    let mut volume = message(&format!("{core}.Volume"));
    set(&mut volume, "name", Field::String("scratch".into()));
    set(&mut volume, "volumeSource", Field::Message(volume_source));
    let mut spec = message(&format!("{core}.PodSpec"));
    set(
        &mut spec,
        "containers",
        Field::List(vec![Field::Message(container)]),
    );
    set(
        &mut spec,
        "volumes",
        Field::List(vec![Field::Message(volume)]),
    );
    set(&mut spec, "terminationGracePeriodSeconds", Field::I64(0));
    let mut pod = message(&format!("{core}.Pod"));
    set(&mut pod, "metadata", Field::Message(metadata));
    set(&mut pod, "spec", Field::Message(spec));
    let mut type_meta = message("k8s.io.apimachinery.pkg.runtime.TypeMeta");
    set(&mut type_meta, "apiVersion", Field::String("v1".into()));
    set(&mut type_meta, "kind", Field::String("Pod".into()));
    let mut unknown = message(UNKNOWN);
    set(&mut unknown, "typeMeta", Field::Message(type_meta));
    set(
        &mut unknown,
        "raw",
        Field::Bytes(prost_reflect::prost::Message::encode_to_vec(&pod).into()),
    );
    let mut body = MAGIC.to_vec();
    body.extend(prost_reflect::prost::Message::encode_to_vec(&unknown));
    let json = decode(&body).expect("decodes");
    assert_eq!(
        json["metadata"]["creationTimestamp"],
        "2023-11-14T22:13:20Z"
    );
    let container = &json["spec"]["containers"][0];
    assert_eq!(container["resources"]["limits"]["cpu"], "500m");
    assert_eq!(container["readinessProbe"]["tcpSocket"]["port"], "http");
    assert_eq!(container["command"], json!(["sleep", "1"]));
    assert_eq!(
        json["spec"]["volumes"][0],
        json!({"name": "scratch", "emptyDir": {}})
    );
    assert_eq!(json["spec"]["terminationGracePeriodSeconds"], 0);
}

#[test]
fn other_kinds_and_bad_bodies_are_refused() {
    assert!(matches!(decode(b"{}"), Err(ProtobufError::Malformed(_))));
    assert!(matches!(
        decode(b"k8s\0\xff\xff"),
        Err(ProtobufError::Malformed(_))
    ));
    let mut body = std::fs::read(format!(
        "{}/src/api/protobuf/fixtures/namespace.pb",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture");
    // "Namespace" -> "Namespacx": a kind without a schema.
    let at = body
        .windows(9)
        .position(|w| w == b"Namespace")
        .expect("kind")
        + 8;
    body[at] = b'x';
    assert!(matches!(
        decode(&body),
        Err(ProtobufError::UnsupportedKind { .. })
    ));
    let kinds = supported_kinds();
    for kind in [
        "Namespace",
        "Pod",
        "Secret",
        "ConfigMap",
        "Service",
        "apps/Deployment",
    ] {
        assert!(kinds.contains(&kind.to_string()), "{kind} in {kinds:?}");
    }
}

#[test]
fn delete_options_in_any_version_are_apimachinery_s() {
    let mut options = message("k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions");
    set(&mut options, "gracePeriodSeconds", Field::I64(0));
    set(
        &mut options,
        "propagationPolicy",
        Field::String("Orphan".into()),
    );
    let mut type_meta = message("k8s.io.apimachinery.pkg.runtime.TypeMeta");
    set(
        &mut type_meta,
        "apiVersion",
        Field::String("apps/v1".into()),
    );
    set(
        &mut type_meta,
        "kind",
        Field::String("DeleteOptions".into()),
    );
    let mut unknown = message(UNKNOWN);
    set(&mut unknown, "typeMeta", Field::Message(type_meta));
    let raw = prost_reflect::prost::Message::encode_to_vec(&options);
    set(&mut unknown, "raw", Field::Bytes(raw.into()));
    let mut body = MAGIC.to_vec();
    body.extend(prost_reflect::prost::Message::encode_to_vec(&unknown));
    let json = decode(&body).expect("decodes");
    assert_eq!(json["gracePeriodSeconds"], 0, "a pointer set to zero stays");
    assert_eq!(json["propagationPolicy"], "Orphan");
}
