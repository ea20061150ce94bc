"""check_report.py: reads the SVG charts of an lmtune report.html back and
compares them with the run's metrics.jsonl, read here independently of
lmtune's reader (report/history.c):

  - every polyline point equals a record's value: x exactly, y exactly on a
    linear axis and log10(value) within 1e-12 on a log one, in record order,
    with a series cut into one polyline per run of finite values;
  - one continuous history over --resume: a "start" event at iteration k
    drops the earlier process's records after k (a fresh start drops all);
  - the best-validation marker sits on the smallest validation loss;
  - a vertical line per skipped update and per resume, at the pixel the
    chart's data transform gives their iteration, with its tooltip;
  - a clip marker per report window with clipped updates, on its largest norm.

usage: check_report.py REPORT.html METRICS.jsonl [--resumes N] [--skips N] [--clips]
Prints one line per check group; exit status 1 on any mismatch.
"""
import html.parser
import json
import math
import re
import sys


class Svg:
    def __init__(self, attrs):
        self.name = attrs.get('data-chart', '')
        self.scale = attrs.get('data-y-scale', '')
        self.polylines = []     # (series, [(x, y)])
        self.matrix = None      # the data group's transform (a, d, e, f)
        self.vlines = []        # (x pixel, tooltip)
        self.marks = []         # (data x, data y, tooltip)


class Parser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.svgs, self.svg, self.title_for, self.text = [], None, None, ''

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == 'svg' and a.get('data-chart'):
            self.svg = Svg(a)
            self.svgs.append(self.svg)
        if self.svg is None:
            return
        if tag == 'g' and a.get('class') == 'data':
            m = re.fullmatch(r'matrix\((\S+) 0 0 (\S+) (\S+) (\S+)\)', a['transform'])
            self.svg.matrix = tuple(float(v) for v in m.groups())
        elif tag == 'polyline':
            pts = [tuple(float(v) for v in p.split(',')) for p in a['points'].split()]
            self.svg.polylines.append((a['data-series'], pts))
        elif tag == 'line' and a.get('class') == 'vline':
            self.title_for = ('vline', float(a['x1']))
        elif tag == 'g' and a.get('class') == 'mark':
            self.title_for = ('mark', float(a['data-x']), float(a['data-y']))
        elif tag == 'title':
            self.text = ''

    def handle_data(self, data):
        self.text += data

    def handle_endtag(self, tag):
        if tag == 'svg':
            self.svg = None
        if tag == 'title' and self.svg is not None and self.title_for:
            if self.title_for[0] == 'vline':
                self.svg.vlines.append((self.title_for[1], self.text))
            else:
                self.svg.marks.append((self.title_for[1], self.title_for[2], self.text))
            self.title_for = None


def history(path):
    """The records of one continuous history (the resume rule, written anew here)."""
    train, val, skips, starts = [], [], [], []
    lines = open(path).read().split('\n')
    complete = lines[:-1]    # what follows the last newline is an incomplete record
    for line in complete:
        if not line.strip():
            continue
        r = json.loads(line)
        it = r['iteration']
        if r.get('event') == 'start':
            if not r['resumed']:
                train, val, skips, starts = [], [], [], []
            train = [t for t in train if t['iteration'] <= it]
            val = [v for v in val if v['iteration'] <= it]
            skips = [s for s in skips if s['iteration'] <= it]
            starts.append(r)
        elif r.get('event') == 'skip':
            skips.append(r)
        elif 'train_loss' in r:
            train.append(r)
        elif 'val_loss' in r:
            val.append(r)
    return train, val, skips, starts


def finite(v, log):
    return v is not None and math.isfinite(v) and (not log or v > 0)


def runs(points, log):
    """(x, y) with y None or non-finite cutting the series, as the report draws it."""
    out, cur = [], []
    for x, y in points:
        if finite(y, log) and x is not None:
            cur.append((x, math.log10(y) if log else y))
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def main():
    args = sys.argv[1:]
    report, metrics = args[0], args[1]
    want_resumes = int(args[args.index('--resumes') + 1]) if '--resumes' in args else None
    want_skips = int(args[args.index('--skips') + 1]) if '--skips' in args else None
    want_clips = '--clips' in args
    p = Parser()
    p.feed(open(report).read())
    train, val, skips, starts = history(metrics)
    charts = {s.name: s for s in p.svgs}
    failures, points_checked = [], 0
    x_of = {'iteration': lambda r: r['iteration'], 'tokens': lambda r: r.get('trained_tokens')}
    specs = []
    for view in ('iteration', 'tokens'):
        for scale in ('linear', 'log'):
            name = 'loss-%s-%s' % (view, scale)
            specs.append((name, 'train_loss', train, x_of[view]))
            specs.append((name, 'val_loss', val, x_of[view]))
    for name, key in (('learning-rate', 'learning_rate'), ('tokens-per-second', 'tokens_per_second'),
                      ('grad-norm', 'grad_norm'), ('grad-norm', 'grad_norm_max'), ('peak-memory', 'peak_memory')):
        specs.append((name, key, train, x_of['iteration']))
    for name, key, records, xf in specs:
        svg = charts.get(name)
        if svg is None:
            failures.append('chart %s is missing' % name)
            continue
        log = svg.scale == 'log'
        want = runs([(xf(r), r.get(key)) for r in records], log)
        got = [pts for series, pts in svg.polylines if series == key]
        if len(got) != len(want) or [len(g) for g in got] != [len(w) for w in want]:
            failures.append('%s/%s: %d polylines of %s points, expected %d of %s' % (
                name, key, len(got), [len(g) for g in got], len(want), [len(w) for w in want]))
            continue
        for g, w in zip(got, want):
            for (gx, gy), (wx, wy) in zip(g, w):
                points_checked += 1
                ok_y = abs(gy - wy) <= 1e-12 * max(1.0, abs(wy)) if log else gy == wy
                if gx != wx or not ok_y:
                    failures.append('%s/%s: point (%r, %r), the metrics file has (%r, %r)' % (
                        name, key, gx, gy, wx, wy))
                    break
    # the best validation point
    finite_val = [v for v in val if finite(v['val_loss'], False)]
    if finite_val:
        best = min(finite_val, key=lambda v: v['val_loss'])
        for name in ('loss-iteration-linear', 'loss-tokens-linear'):
            svg = charts[name]
            bx = best['iteration'] if 'iteration' in name else best['trained_tokens']
            if [(m[0], m[1]) for m in svg.marks] != [(bx, best['val_loss'])]:
                failures.append('%s: best-validation marker %r, expected (%r, %r)' % (
                    name, [(m[0], m[1]) for m in svg.marks], bx, best['val_loss']))
    # skipped updates and resumes: vertical lines at the right pixel
    resumes = [s for s in starts if s['resumed']]
    want_lines = sorted(['iteration %d: non-finite %s, update skipped' % (s['iteration'], s['reason'])
                         for s in skips] +
                        ['resumed from the state saved at iteration %d' % s['iteration'] for s in resumes])
    for name in ('loss-iteration-linear', 'learning-rate', 'tokens-per-second', 'grad-norm', 'peak-memory'):
        svg = charts[name]
        if sorted(t for _, t in svg.vlines) != want_lines:
            failures.append('%s: vertical lines %r, expected %r' % (name, sorted(t for _, t in svg.vlines), want_lines))
            continue
        a, _, e, _ = svg.matrix
        for px, tip in svg.vlines:
            it = int(re.search(r'iteration (\d+)', tip).group(1))
            if abs(px - (a * it + e)) > 0.01:
                failures.append('%s: the line "%s" is at x=%.2f px, iteration %d is at %.2f px' % (
                    name, tip, px, it, a * it + e))
    # clipped updates
    clip_want = sorted((float(t['iteration']), t['grad_norm_max']) for t in train if t.get('clipped_updates'))
    clip_got = sorted((m[0], m[1]) for m in charts['grad-norm'].marks)
    if clip_got != clip_want:
        failures.append('grad-norm: clip markers %r, expected %r' % (clip_got, clip_want))
    if want_clips and not clip_want:
        failures.append('expected clipped updates in this run, the metrics file has none')
    if want_resumes is not None and len(resumes) != want_resumes:
        failures.append('expected %d resumes, the metrics file has %d' % (want_resumes, len(resumes)))
    if want_skips is not None and len(skips) != want_skips:
        failures.append('expected %d skipped updates, the metrics file has %d' % (want_skips, len(skips)))
    for f in failures:
        print('FAIL: %s' % f)
    print('report %s: %d charts, %d points equal to the metrics file (%d train, %d validation records), '
          '%d skips, %d resumes, %d clip markers, %d mismatches' % (
              report, len(charts), points_checked, len(train), len(val), len(skips), len(resumes), len(clip_want),
              len(failures)))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
