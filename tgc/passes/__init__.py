"""Passes: the pass manager, and one file per pass, loaded by name on first use."""
from tgc.passes.manager import Pass, PassManager, PASSES, PipelineError, PassFailure, Instrumentation, parse_pipeline, list_passes, get_pass

__all__ = ['Pass', 'PassManager', 'PASSES', 'PipelineError', 'PassFailure', 'Instrumentation', 'parse_pipeline', 'list_passes', 'get_pass']
