"""The /suggest contract as pydantic models: every field validated, every error naming its field."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from rlscore.core.state import POLICIES
from suggestion_server.node_state.node_table import MAX_COUNT, MAX_LATENCY_MS, MAX_QUANTITY, MAX_WATTS

# Kubernetes' own name rules: node and pod names are DNS-1123 subdomains, namespaces DNS-1123 labels.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# annotation keys: an optional DNS subdomain prefix and "/", then a name of letters, digits, "-_."
ANNOTATION_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
MAX_ANNOTATION_VALUE = 4096
PATTERN_MESSAGES = {
    DNS_SUBDOMAIN: "must be a Kubernetes name (DNS-1123 subdomain: lowercase letters, digits, '-' and '.', "
                   "starting and ending with a letter or digit)",
    DNS_LABEL: "must be a Kubernetes namespace (DNS-1123 label: lowercase letters, digits and '-', at most 63)",
    ANNOTATION_KEY: "must be an annotation key ([prefix/]name of letters, digits, '-', '_' and '.')",
}

Name = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN,
                            description="a Kubernetes name (DNS-1123 subdomain)")]
Namespace = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL,
                                 description="a Kubernetes namespace (DNS-1123 label)")]
AnnotationKey = Annotated[str, Field(min_length=1, max_length=317, pattern=ANNOTATION_KEY)]
AnnotationValue = Annotated[str, Field(max_length=MAX_ANNOTATION_VALUE)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
# a node's and a pod's quantities: as every source's (suggestion_server.node_state.node_table)
Quantity = Annotated[float, Field(ge=0, le=MAX_QUANTITY, allow_inf_nan=False)]
PositiveQuantity = Annotated[float, Field(gt=0, le=MAX_QUANTITY, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]


class PodIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: Name
    namespace: Namespace = "default"
    cpu_request_millicores: Quantity = 0
    memory_request_bytes: Quantity = 0
    annotations: dict[AnnotationKey, AnnotationValue] = Field(
        default_factory=dict, max_length=64, description="the pod's rlscore.io/* and latency annotations")

    @field_validator("annotations")
    @classmethod
    def _printable(cls, annotations: dict[str, str]) -> dict[str, str]:
        for key, value in annotations.items():
            if not value.isprintable():
                raise ValueError(f"annotation {key!r} has a control or non-printable character")
        return annotations


class NodeIn(BaseModel):
    """A node with (some of) its state; what is left out comes from the server's snapshot."""

    model_config = ConfigDict(extra="ignore")

    name: Name
    cpu_capacity_millicores: PositiveQuantity | None = None
    memory_capacity_bytes: PositiveQuantity | None = None
    max_pods: Annotated[int, Field(gt=0, le=MAX_COUNT)] | None = None
    cpu_requested_millicores: Quantity | None = None
    memory_requested_bytes: Quantity | None = None
    pods: Count | None = None
    cpu_utilization: Fraction | None = None
    memory_utilization: Fraction | None = None
    latency_ms: Annotated[float, Field(ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)] | None = None
    power_idle_watts: Annotated[float, Field(ge=0, le=MAX_WATTS, allow_inf_nan=False)] | None = Field(
        None, description="the node's draw when idle (power model)")
    power_max_watts: Annotated[float, Field(gt=0, le=MAX_WATTS, allow_inf_nan=False)] | None = Field(
        None, description="the node's draw at full cpu load (power model)")
    network_receive_bytes_per_s: Quantity | None = None
    tcp_established: Quantity | None = Field(None, description="established TCP connections")
    disk_utilization: Fraction | None = Field(None, description="used share of the root filesystem")
    cpu_utilization_stddev: Fraction | None = Field(
        None, description="standard deviation of cpu_utilization over the last minutes (LoadVariationRiskBalancing)")

    @model_validator(mode="after")
    def _power_model(self) -> NodeIn:
        idle, peak = self.power_idle_watts, self.power_max_watts
        if idle is not None and peak is not None and peak < idle:
            raise ValueError(f"power_max_watts ({peak}) must not be below power_idle_watts ({idle})")
        return self


def first_duplicate(names: list[str]) -> str | None:
    """The first name that occurs twice (a set decides whether to look: the common case is none)."""
    if len(set(names)) == len(names):
        return None
    seen: set[str] = set()
    return next(name for name in names if name in seen or seen.add(name))


def _node_kind(value) -> str | None:
    if isinstance(value, str):
        return "name"
    if isinstance(value, (dict, NodeIn)):
        return "object"
    return None


# A node is either its name or an object carrying (some of) its state.
NodeEntry = Annotated[
    Annotated[Name, Tag("name")] | Annotated[NodeIn, Tag("object")],
    Discriminator(_node_kind, custom_error_type="node_entry",
                  custom_error_message="each node must be a node name or an object with a name"),
]


def policy_field(value: str | None) -> str | None:
    """A request's policy field, normalized (EE, LB, EL); ValueError names an unknown one."""
    if value is None:
        return None
    policy = value.strip().upper()
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {value!r}: expected one of {', '.join(POLICIES)}")
    return policy


PolicyField = Annotated[str | None, AfterValidator(policy_field),
                        Field(description="EE, LB or EL (case-insensitive); overrides the pod's annotation")]


class SuggestRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    pod: PodIn
    nodes: list[NodeEntry] = Field(min_length=1)
    policy: PolicyField = None

    @field_validator("nodes")
    @classmethod
    def _unique_names(cls, nodes: list) -> list:
        duplicate = first_duplicate([node if isinstance(node, str) else node.name for node in nodes])
        if duplicate is not None:
            raise ValueError(f"duplicate node name {duplicate!r}")
        return nodes

    def node_names(self) -> list[str]:
        return [n if isinstance(n, str) else n.name for n in self.nodes]


class SuggestResponse(BaseModel):
    policy: Literal["EE", "LB", "EL"]
    model_version: str | None = Field(description="version of the model that scored, null for the fallback heuristic")
    source: Literal["model", "heuristic", "candidate"] = Field(
        description="model; heuristic (the fallback, or a heuristic promoted in a model's place: model_version "
                    "names it); candidate (a canary pod scored by the staged candidate)")
    degraded: bool = Field(description="true when any node state was missing or stale (see reasons)")
    reasons: list[str]
    scores: dict[str, Annotated[int, Field(ge=0, le=100)]]


class ScoresHeader(BaseModel):
    """First line of a POST /v1/scores body: the pod and the policy; node names follow, one per line."""

    model_config = ConfigDict(extra="ignore")

    pod: PodIn
    policy: PolicyField = None
