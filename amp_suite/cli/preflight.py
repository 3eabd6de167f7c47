"""What `amp-suite run` checks of the workloads it was not shipped with, before any cell: that each
model named from torchvision or timm exists, that each Hugging Face model's config loads for its
task (its own code refused unless trusted) within the parameter limit, and that each user entry
imports, runs and returns an amp_suite.UserWorkload (called in a child process within a limit,
amp_suite.cli.entry_check: the user's code never runs in the process that keeps the records). And
the matrix `--model ENTRY` stands for."""

from __future__ import annotations

import difflib
import json
import logging
import tempfile
from pathlib import Path

import yaml
from pydantic import ValidationError

from amp_suite.cli.entry_check import check_entry, entry_check_limit
from amp_suite.config import ConfigError, Matrix, describe_validation_error
from amp_suite.config.precisions import ARTICLE_MODES
from amp_suite.config.workloads import WORKLOAD_CONFIG_BY_NAME, CustomConfig, HfConfig, TimmConfig, TorchvisionConfig
from amp_suite.paths import cache_folder, shown

# --model's matrix: every mode the article compares (config.precisions.ARTICLE_MODES), one seed,
# short enough to answer in minutes.
MODEL_MATRIX = {"seed": 0, "repeats": 1, "warmup_steps": 10, "steps": 120, "precisions": list(ARTICLE_MODES)}
# The workload a --model entry is: the user's own.
ENTRY_WORKLOAD = next(name for name, config in WORKLOAD_CONFIG_BY_NAME.items() if config is CustomConfig)
MODEL_BATCH_SIZE = 32


def model_matrix(entry: str) -> tuple[Matrix, str]:
    """The one-workload matrix `--model ENTRY` runs, and its text for the run's record. A file
    entry is named from the working directory."""
    workload = {"workload": ENTRY_WORKLOAD, "entry": entry, "batch_sizes": [MODEL_BATCH_SIZE]}
    try:
        name = CustomConfig.model_validate(workload).name
        data = {"name": name, **MODEL_MATRIX, "workloads": [workload]}
        matrix = Matrix.model_validate(data, context={"matrix_dir": Path.cwd()})
    except ValidationError as exc:
        raise ConfigError(f"--model {entry}: {describe_validation_error(exc, Matrix)}") from None
    return matrix, yaml.safe_dump(matrix.model_dump(mode="json", exclude_unset=True), sort_keys=False)


def check_workloads(matrix: Matrix) -> None:
    """Every problem a cell would only meet later, as one ConfigError line (exit 2)."""
    check_data_cache(matrix)
    check_model_names(matrix)
    check_hf_models(matrix)
    check_entries(matrix)


def check_data_cache(matrix: Matrix) -> None:
    """The cache where cells keep the data sets they build (amp_suite.data.sources) can be written:
    a read-only HOME is one line here, not the same failure in every cell. A user's entry brings
    its own data, and needs none."""
    if all(workload.data.source == "entry" for workload in matrix.workloads):
        return
    folder = cache_folder() / "datasets"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()  # os.access can't see a read-only file system as root
    except OSError as exc:
        raise ConfigError(
            f"the cache {shown(folder)}, where cells keep the data sets they build, can't be written"
            f" ({exc.strerror or exc}); set XDG_CACHE_HOME to a folder that can be"
        ) from None


def check_model_names(matrix: Matrix) -> None:
    """Each model named from torchvision or timm exists there, or one line with the close names."""
    for workload in matrix.workloads:
        if type(workload) in MODEL_LISTS:
            library, known, listed_by = MODEL_LISTS[type(workload)]()
            architecture = workload.model.split(".", 1)[0]  # timm's pretrained tag (resnet18.a1_in1k) aside
            if architecture not in known:
                close = difflib.get_close_matches(architecture, known, n=3)
                hint = f"did you mean {', '.join(close)}? " if close else ""
                raise ConfigError(f"{library} has no model {workload.model!r}: {hint}({listed_by} lists them)")


def _torchvision_models() -> tuple[str, list[str], str]:
    import torchvision

    listed_by = "torchvision.models.list_models(module=torchvision.models)"  # the classification models
    return torchvision.__name__, torchvision.models.list_models(module=torchvision.models), listed_by


def _timm_models() -> tuple[str, list[str], str]:
    try:
        import timm
    except ImportError:
        raise ConfigError("workload: timm needs timm: pip install 'amp-suite[timm]' (the image has it)") from None
    return timm.__name__, timm.list_models(), "timm.list_models()"


# The library that builds each kind of named model, and the names it lists.
MODEL_LISTS = {TorchvisionConfig: _torchvision_models, TimmConfig: _timm_models}


def check_hf_models(matrix: Matrix) -> None:
    """Each Hugging Face model's config loads, names no code of its own (unless the matrix trusts
    it), has a model class for its task and a size within the parameter limit (counted on the meta
    device): a missing folder, a Hub id out of reach, an unknown architecture or a 70B config is one
    line here, not a failed cell per mode."""
    for workload in matrix.workloads:
        if isinstance(workload, HfConfig):
            _quiet_hf_imports()
            from amp_suite.workloads.hf import HfModelError, checked_size, load_model_config

            try:
                checked_size(workload, load_model_config(workload))
            except HfModelError as exc:
                raise ConfigError(f"{workload.name}: {exc}") from None


def _quiet_hf_imports() -> None:
    """This process's stderr is for the run's own lines: not for the Hub client's retry messages
    (the one-line error says what they came to), nor for the deprecation warnings torch logs when
    transformers imports torchao."""
    import huggingface_hub  # noqa: F401  (it sets its loggers' level when first imported)
    import torch  # noqa: F401  (and torch its own)

    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)


def check_entries(matrix: Matrix) -> None:
    """Call each user entry once, with its args, in a child process within a limit
    (amp_suite.cli.entry_check); its one-line reason becomes a ConfigError (exit 2) before any cell
    runs. The matrix already refused an entry its source does not declare (config.entries)."""
    entries = [workload for workload in matrix.workloads if isinstance(workload, CustomConfig)]
    if not entries:
        return
    limit_s = entry_check_limit()
    seen: set[str] = set()
    for workload in entries:
        key = json.dumps([workload.entry, workload.args], sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        reason = check_entry(workload.entry, workload.args, limit_s)
        if reason is not None:
            raise ConfigError(reason)
