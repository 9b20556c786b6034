"""What reaches a provider API is checked here first.

The RunPod SDK pastes every string into its GraphQL document between double quotes with no
escaping (runpod 1.11.0, runpod/api/mutations/pods.py ``generate_pod_deployment_mutation``), and Vast
runs ``onstart`` through a shell on the box. So: names and image references are validated against
narrow patterns (a bad one is BadInput before anything is rented); free-form values (environment
values, the SSH public key) are escaped for the place they land in (``graphql_escape``,
``shlex.quote``).
"""

from __future__ import annotations

import json
import re
import shlex

from gpuops.errors import BadInput

# Labels are ours (gpuops-<session>), but experiment names flow into them: keep them to what every
# provider accepts as a name and what needs no quoting anywhere (RunPod pod names, Vast labels).
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# A docker image reference: [registry[:port]/]path[:tag][@digest]; no spaces, quotes or backslashes.
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
SSH_KEY_RE = re.compile(
    r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\x00-\x1f\x7f]*)?$"
)
# Provider-side identifiers we paste back (pod ids, GPU type ids from the catalog).
PROVIDER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._:/()-]{0,127}$")


def check_label(label: str) -> str:
    """``label`` unchanged, or BadInput: 1-64 chars of letters, digits, ``.``, ``_``, ``-``."""
    if not LABEL_RE.match(label or ""):
        raise BadInput(
            f"label {label!r} is not allowed",
            "use 1-64 letters, digits, '.', '_' or '-' (experiment names end up in it)",
        )
    return label


def check_image(image: str) -> str:
    """``image`` unchanged, or BadInput when it is not a plain docker reference."""
    if not IMAGE_RE.match(image or ""):
        raise BadInput(
            f"image {image!r} is not a docker image reference",
            "use e.g. runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
        )
    return image


def check_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with string values; BadInput for a bad name or a control character in a value.

    ``env`` with string values, or BadInput for a bad name or a value with a control character
    (newline, NUL: they would split a docker ``-e`` or a shell line on the provider side)."""
    out = {}
    for k, v in env.items():
        if not ENV_KEY_RE.match(str(k)):
            raise BadInput(
                f"environment name {k!r} is not allowed", "use letters, digits and '_', not starting with a digit"
            )
        v = str(v)
        if re.search(r"[\x00-\x08\x0a-\x1f\x7f]", v):
            raise BadInput(
                f"environment value of {k} contains a control character",
                "remove newlines and control characters from the value",
            )
        out[k] = v
    return out


def check_ssh_public_key(key: str) -> str:
    """The one-line OpenSSH public key, stripped, or BadInput."""
    key = (key or "").strip()
    if not SSH_KEY_RE.match(key):
        raise BadInput(
            "the SSH public key is not a single OpenSSH public key line",
            "pass the contents of a .pub file (ssh-ed25519 AAAA... comment)",
        )
    return key


def check_provider_id(value: str, what: str) -> str:
    """An id we send back to a provider (pod id, GPU type id); BadInput for anything unusual."""
    if not PROVIDER_ID_RE.match(value or ""):
        raise BadInput(f"{what} {value!r} is not a valid identifier", "check the catalog entry or the instance id")
    return value


def graphql_escape(value: str) -> str:
    """The body of a GraphQL string literal for ``value`` (without the surrounding quotes).

    GraphQL string escapes (\\\\ \\" \\n \\t \\uXXXX ...) are a subset of JSON's, so JSON encoding
    is a correct escape; the SDK adds the quotes itself.
    """
    return json.dumps(str(value), ensure_ascii=True)[1:-1]


def authorized_keys_onstart(public_key: str) -> str:
    """A shell line that appends ``public_key`` to root's authorized_keys (Vast ``onstart``).

    The key is validated and passed through ``shlex.quote``, so it reaches the box as one argument.
    """
    key = shlex.quote(check_ssh_public_key(public_key))
    return f"mkdir -p /root/.ssh && chmod 700 /root/.ssh && printf '%s\\n' {key} >> /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys"
