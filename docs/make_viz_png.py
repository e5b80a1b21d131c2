"""The pictures of docs/viz.md: tgc-viz's page for examples/softmax.tgc (run 20 times on the CPU, profiled), shot by
headless Chromium, one PNG per tab.

    python docs/make_viz_png.py            # docs/viz-kernels.png, docs/viz-pipeline.png, docs/viz-profile.png
    python docs/make_viz_png.py --browser /usr/bin/chromium --input examples/dot.tgc
"""
from __future__ import annotations
import argparse, os, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def browser(given: str | None) -> str | None:
  return given or next((p for p in map(shutil.which, ('chromium', 'chromium-browser', 'google-chrome')) if p), None)


def screenshot(exe: str, url: str, png: str, size: str = '1400,900') -> None:
  """One headless shot of url (no GPU, no network besides the file, a throwaway profile)."""
  with tempfile.TemporaryDirectory() as profile:
    subprocess.run([exe, '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                    '--disable-background-networking', '--disable-component-update', '--disable-sync', f'--user-data-dir={profile}',
                    '--hide-scrollbars', f'--screenshot={png}', f'--window-size={size}', url],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--input', default=os.path.join(ROOT, 'examples', 'softmax.tgc'))
  ap.add_argument('--browser', default=None, help='Chromium or Chrome (default: the first on PATH)')
  ap.add_argument('--out', default=os.path.join(ROOT, 'docs'), help='the folder of the PNGs')
  args = ap.parse_args(argv)
  exe = browser(args.browser)
  if exe is None:
    sys.stderr.write("make_viz_png: no chromium on PATH (apt-get install chromium), or give --browser\n"); return 1
  from tgc.viz.tool import main as viz
  with tempfile.TemporaryDirectory() as d:
    page = os.path.join(d, 'viz.html')
    if viz([args.input, '--run', '20', '-o', page]) != 0: return 1
    for tab in ('kernels', 'pipeline', 'profile'):
      png = os.path.join(args.out, f'viz-{tab}.png')
      screenshot(exe, f'file://{page}#{tab}', png)
      print(png)
  return 0


if __name__ == '__main__':
  sys.exit(main())
