"""A record's workload config read back, for the traits its numbers are printed with (throughput
unit, metric label). A config written by another version of the suite may no longer validate: its
traits then fall back to what is true of any workload."""

from __future__ import annotations

import json
from functools import cache

from pydantic import TypeAdapter, ValidationError

from amp_suite.config.workloads import WorkloadConfig

_WORKLOAD = TypeAdapter(WorkloadConfig)


def recorded_workload(workload: object) -> WorkloadConfig | None:
    """The workload config a record holds (`record.config["workload"]`), validated; None where it
    is missing or does not validate."""
    if not isinstance(workload, dict):
        return None
    return _parsed(json.dumps(workload, sort_keys=True))  # a string key: parsed once per config


@cache
def _parsed(config_json: str) -> WorkloadConfig | None:
    try:
        return _WORKLOAD.validate_json(config_json)
    except ValidationError:
        return None


def metric_label_of(workload: object, metric: str) -> str:
    """The short label tables give the validation metric `metric` (the record's val_metric_name) of
    the workload config `workload` (its config["workload"]): the one the config declares ("acc",
    "ppl"), else, for a user's entry or a config that no longer validates, the metric's name
    without its val_ prefix (val_dice -> "dice")."""
    config = recorded_workload(workload)
    declared = config.metric_label if config is not None else None
    return declared or metric.removeprefix("val_")
