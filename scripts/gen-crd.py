#!/usr/bin/env python3
"""gen-crd.py - write the TrainingJob CRD from its hand-written part and the
Kubernetes API server's own OpenAPI, so spec.template is checked as a pod is.

    scripts/gen-crd.py crds/trainingjobs.in.yaml OPENAPI-V1.json v1.34.4 > crds/ftcomm.dev_trainingjobs.yaml
    scripts/gen-crd.sh       (starts the test control plane, fetches /openapi/v3/api/v1, runs this)

crds/trainingjobs.in.yaml is the CRD with every field but the pod template written
out; its spec.template carries `x-ftcomm-embed: io.k8s.api.core.v1.PodTemplateSpec`.
That node is replaced by the structural schema of the named type, read from the
OpenAPI v3 document of the core group (`kubectl get --raw /openapi/v3/api/v1`) of the
kube-apiserver the tests build (tests/cluster). The conversion does what Kubeflow's and
JobSet's generators (controller-gen) do, and a little less:

- $ref and allOf:[$ref] are inlined (the pod's types have no cycles; one is refused);
- Quantity and IntOrString (oneOf string/number) become x-kubernetes-int-or-string;
- descriptions are dropped (with them the template alone is about 430 kB of JSON, above
  the 256 kB `kubectl apply` can keep in its last-applied annotation; without, the whole
  CRD is about 65 kB), except the ones this project writes
  (the template's own, and those in CONTROLLER_OWNED: the fields the controller sets);
  `kubectl explain` shows every field with its type;
- defaults are dropped (the pod API defaults the pod; a default here would be stored in
  the TrainingJob, and `default: ""` would satisfy a required name);
- list and map merge hints (x-kubernetes-list-type, -map-keys, -patch-*) are dropped:
  a CRD list is atomic for server-side apply, and list-map keys must be required or
  defaulted in a CRD, which the pod's are not;
- the embedded ObjectMeta keeps labels and annotations only (what a template's
  metadata may carry; the API server would prune the rest anyway).
"""
import json
import sys

import yaml

EMBED = "x-ftcomm-embed"
KEEP_FORMATS = {"int32", "int64", "float", "double", "byte", "date-time"}
INT_OR_STRING = {"io.k8s.apimachinery.pkg.api.resource.Quantity", "io.k8s.apimachinery.pkg.util.intstr.IntOrString"}
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# Fields of the pod the controller sets or adds to; their description says so.
CONTROLLER_OWNED = {
    ("spec", "restartPolicy"): "Set to Never by the controller: a lost rank is replaced by a new pod, not restarted in place.",
    ("spec", "containers", "[]", "env"): "The controller appends the FTCOMM_* environment (docs/environment.md) to each container's env.",
    ("spec", "affinity"): "A replacement gets a required node affinity away from the nodes where its slot failed (failurePolicy.avoidFailedNodes), added to this one.",
    ("metadata", "labels"): "Given to every pod, with the controller's own: ftcomm.dev/job, ftcomm.dev/slot, ftcomm.dev/incarnation, app.kubernetes.io/managed-by.",
    ("metadata", "annotations"): "Given to every pod; the controller adds ftcomm.dev/avoid-nodes to a replacement.",
}


def ref_name(node):
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[-1]
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return all_of[0]["$ref"].rsplit("/", 1)[-1]
    return None


def object_meta():
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    return {"type": "object", "properties": {"labels": dict(string_map), "annotations": dict(string_map)}}


def convert(node, schemas, stack, path):
    name = ref_name(node)
    if name:
        if name in INT_OR_STRING:
            out = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
        elif name == OBJECT_META:
            out = object_meta()
        else:
            if name in stack:
                sys.exit("gen-crd.py: %s refers to itself (%s); a CRD schema cannot" % (name, " -> ".join(stack)))
            out = convert(schemas[name], schemas, stack + [name], path)
    else:
        out = {}
        for key in ("type", "enum", "minimum", "maximum", "minItems", "maxItems", "minLength", "maxLength",
                    "pattern", "required", "nullable"):
            if key in node:
                out[key] = node[key]
        if node.get("format") in KEEP_FORMATS:
            out["format"] = node["format"]
        if "properties" in node:
            out["properties"] = {k: convert(v, schemas, stack, path + (k,)) for k, v in node["properties"].items()}
        if "items" in node:
            out["items"] = convert(node["items"], schemas, stack, path + ("[]",))
        if "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
            out["additionalProperties"] = convert(node["additionalProperties"], schemas, stack, path + ("{}",))
        if node.get("x-kubernetes-preserve-unknown-fields"):
            out["x-kubernetes-preserve-unknown-fields"] = True
        if "oneOf" in node and "type" not in out:
            sys.exit("gen-crd.py: %s: a oneOf that is not a known int-or-string type" % ".".join(path))
    if path in CONTROLLER_OWNED:
        out = dict(out)
        out["description"] = CONTROLLER_OWNED[path]
    return out


def find_embeds(node, found):
    if isinstance(node, dict):
        if EMBED in node:
            found.append(node)
        for v in node.values():
            find_embeds(v, found)
    elif isinstance(node, list):
        for v in node:
            find_embeds(v, found)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: gen-crd.py CRD.in.yaml OPENAPI-V1.json KUBE-VERSION > CRD.yaml")
    src = open(sys.argv[1]).read()
    crd = yaml.safe_load(src)
    schemas = json.load(open(sys.argv[2]))["components"]["schemas"]
    found = []
    find_embeds(crd, found)
    if not found:
        sys.exit("gen-crd.py: %s has no %s node" % (sys.argv[1], EMBED))
    for node in found:
        type_name = node.pop(EMBED)
        if type_name not in schemas:
            sys.exit("gen-crd.py: the OpenAPI document has no %s" % type_name)
        ours = {k: v for k, v in node.items()}  # hand-written: description, extra required, validations
        node.clear()
        node.update(convert(schemas[type_name], schemas, [type_name], ()))
        merge(node, ours)
    header = [line for line in src.splitlines() if line.startswith("#")]
    out = sys.stdout
    for line in header:
        out.write(line + "\n")
    out.write("# Generated by scripts/gen-crd.py from crds/trainingjobs.in.yaml and the OpenAPI of\n")
    out.write("# kube-apiserver %s (tests/cluster); do not edit: edit the .in file and run scripts/gen-crd.sh.\n"
              % sys.argv[3])
    yaml.safe_dump(crd, out, sort_keys=False, width=110, default_flow_style=False)


def merge(node, ours):
    """Lay the hand-written part (description, required, properties' own keys) over the generated one."""
    for k, v in ours.items():
        if k == "properties":
            props = node.setdefault("properties", {})
            for pk, pv in v.items():
                if pk in props:
                    merge(props[pk], pv)
                else:
                    props[pk] = pv
        elif k == "items":
            merge(node.setdefault("items", {}), v)
        elif k == "required":
            req = node.setdefault("required", [])
            req.extend(x for x in v if x not in req)
        else:
            node[k] = v


if __name__ == "__main__":
    main()
