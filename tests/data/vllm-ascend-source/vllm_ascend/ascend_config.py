# A cut-down vllm_ascend/ascend_config.py: one of each way vllm-ascend reads its additional config.
import os


class AscendConfig:
    def __init__(self, vllm_config):
        additional_config = vllm_config.additional_config if vllm_config.additional_config is not None else {}
        if "enable_sparse_c8" in additional_config:
            raise ValueError("enable_sparse_c8 was split: use enable_sparse_sfa_c8 and enable_sparse_li_c8.")
        xlite_graph_config = additional_config.get("xlite_graph_config", {})
        self.xlite_graph_config = XliteGraphConfig(xlite_graph_config, vllm_config)
        self.compilation = AscendCompilationConfig(**additional_config.get("ascend_compilation_config", {}))
        self.scheduler_config = SchedulerConfig(additional_config)
        self.enable_sparse_sfa_c8 = additional_config.get("enable_sparse_sfa_c8", False)
        self.enable_sparse_li_c8 = additional_config.get("enable_sparse_li_c8", False)
        self.enable_mlapo = self._get_config_value(additional_config, "enable_mlapo", "VLLM_ASCEND_ENABLE_MLAPO")

    @staticmethod
    def _get_config_value(additional_config, config_key, env_key):
        if config_key in additional_config:
            return additional_config[config_key]
        return os.getenv(env_key)


class XliteGraphConfig:
    def __init__(self, xlite_graph_config, vllm_config):
        self.enabled = xlite_graph_config.get("enabled", False)


class AscendCompilationConfig:
    def __init__(self, enable_npugraph_ex: bool = True, **kwargs):
        self.enable_npugraph_ex = enable_npugraph_ex


class ProfilingChunkConfig:
    _defaults = {"enabled": False, "min_chunk": 4096}

    def __init__(self, config=None):
        config = {} if config is None else config
        self.enabled = config.get("enabled", False)


class SchedulerConfig:
    def __init__(self, additional_config):
        scheduler_config = additional_config.get("scheduler_config") or {}
        self.profiling_chunk_config = ProfilingChunkConfig(
            self._get_config_value(scheduler_config, additional_config, "profiling_chunk_config", {})
        )

    @staticmethod
    def _get_config_value(scheduler_config, additional_config, config_key, default):
        return scheduler_config.get(config_key, additional_config.get(config_key, default))
