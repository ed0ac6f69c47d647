"""Reading a /metrics page the way Prometheus parses it."""

from prometheus_client.parser import text_string_to_metric_families


def counter(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels` (0 when there are none)."""
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def by_label(text: str, name: str, label: str) -> dict[str, float]:
    """The samples named `name`, by the value of their label `label`."""
    return {s.labels[label]: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name and label in s.labels}
