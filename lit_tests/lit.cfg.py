# lit configuration: RUN lines call the installed tools (tgc-opt, tgc-translate, tgc-run) and FileCheck
# (the `filecheck` Python package).
import os, shutil, sys, sysconfig
import lit.formats

config.name = 'tgc'
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = ['.tgc', '.py']
config.excludes = ['lit.cfg.py', 'Inputs']
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, 'Output')

scripts = sysconfig.get_path('scripts')
path = os.pathsep.join([scripts, os.path.dirname(sys.executable), os.environ.get('PATH', '')])
config.environment['PATH'] = path
for var in ('HOME', 'TMPDIR', 'XDG_CACHE_HOME', 'PYTHONPATH', 'OCL_ICD_VENDORS', 'POCL_DEVICES'):
  if var in os.environ: config.environment[var] = os.environ[var]
config.environment['PYTHONPATH'] = os.pathsep.join([os.path.dirname(config.test_source_root), os.environ.get('PYTHONPATH', '')])
config.environment.pop('DEBUG', None)

filecheck = shutil.which('filecheck', path=path) or 'filecheck'
config.substitutions.append(('%python', sys.executable))
config.substitutions.append(('FileCheck', filecheck))
