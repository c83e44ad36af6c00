import os

os.environ["VLLM_WRITTEN_NOT_READ"] = "1"


def check_and_update_config(vllm_config):
    enable_dsa_cp = bool((vllm_config.additional_config or {}).get("enable_dsa_cp", False))
    timeout = os.environ.get("ASCEND_TRANSFER_TIMEOUT")
    return enable_dsa_cp, timeout, "HCCL_OP_EXPANSION_MODE" in os.environ
