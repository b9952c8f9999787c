"""muster.api: Kueue-shaped input decoded and validated into the model in `muster.api.model`.

Everything else in muster reads the model; this package is the only place that knows how
Kueue v1beta1/v1beta2, batch/v1 Jobs, Kueue's Configuration, v1 Nodes and Pods and the gang
sources (the Workload API, scheduler-plugins' PodGroup) are spelled on the wire.
"""

from muster.api.decode import (
    VALIDATIONS,
    Validation,
    decode_documents,
    decode_files,
    decode_yaml,
    kueue_config_from_file,
    structural_error,
    with_generated_name,
)
from muster.api.encode import quantities_to_strings, workload_to_kueue
from muster.api.errors import FieldError
from muster.api.job import workload_name_for_job
from muster.api.load import LoadError, load_json, load_yaml
from muster.api.quantity import QuantityError, format_quantity, parse_quantity
from muster.api.validate import identity, validate

__all__ = [
    "VALIDATIONS",
    "FieldError",
    "LoadError",
    "QuantityError",
    "Validation",
    "decode_documents",
    "decode_files",
    "decode_yaml",
    "format_quantity",
    "identity",
    "kueue_config_from_file",
    "load_json",
    "load_yaml",
    "parse_quantity",
    "quantities_to_strings",
    "structural_error",
    "validate",
    "with_generated_name",
    "workload_name_for_job",
    "workload_to_kueue",
]
