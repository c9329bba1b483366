#define _POSIX_C_SOURCE 200809L
#include "base/trace.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/prof.h"

enum { GT__EV_SPAN, GT__EV_TEXT, GT__EV_STMT, GT__EV_COUNTER };
#define GT__TEXT 64
#define GT__NSERIES 8

/* One event; spans keep static strings by pointer and copy only phase and
 * step names, counters their values. */
typedef struct gt__ev {
  int64_t ts, dur; /* ns since the trace's origin */
  const char *name, *cat, *arg_name, *group;
  const char *const *keys;
  int64_t arg;
  int32_t kind, n;
  union {
    char text[GT__TEXT];
    int64_t v[GT__NSERIES];
  } u;
} gt__ev;

typedef struct gt__chunk {
  struct gt__chunk *next;
  int n;
  gt__ev ev[GT_TRACE_CHUNK];
} gt__chunk;

/* Cache-line aligned and allocated apart: lanes written by different
 * threads never share a line. */
struct gt_trace_lane {
  _Alignas(64) gt_trace *tr;
  int tid, sort;
  char name[32];
  char counter[48];
  gt__chunk *head, *tail;
  int64_t n, dropped, max;
  double origin;
  int phase_open;
  double phase_t0;
  char phase[GT__TEXT];
  gt_mem *mem; /* watched by this lane's probe */
};

struct gt_trace {
  int n_dev, n_lanes;
  gt_trace_lane **lanes; /* host, then per device: worker, comm */
};

gt_rc gt_trace_create(gt_trace **out, int n_devices, int64_t max_events, gt_err *err) {
  *out = NULL;
  if (n_devices < 1 || n_devices > 1024)
    return gt_err_set(err, GT_ERR_ARG, "trace: %d devices; expected 1..1024", n_devices);
  gt_trace *t = calloc(1, sizeof *t);
  if (!t) return gt_err_set(err, GT_ERR_NOMEM, "trace: no memory");
  t->n_dev = n_devices;
  t->n_lanes = 2 + 2 * n_devices;
  t->lanes = calloc((size_t)t->n_lanes, sizeof *t->lanes);
  double origin = gt_prof_now();
  for (int i = 0; t->lanes && i < t->n_lanes; i++) {
    gt_trace_lane *l = aligned_alloc(64, (sizeof *l + 63) & ~(size_t)63);
    if (!l) break;
    memset(l, 0, sizeof *l);
    l->tr = t;
    l->tid = i + 1;
    l->sort = i;
    l->max = max_events > 0 ? max_events : GT_TRACE_MAX_EVENTS_DEFAULT;
    l->origin = origin;
    if (i == 0)
      snprintf(l->name, sizeof l->name, "host (loop)");
    else if (i == t->n_lanes - 1)
      snprintf(l->name, sizeof l->name, "checkpoint writer");
    else
      snprintf(l->name, sizeof l->name, (i - 1) % 2 ? "device %d comm" : "device %d", (i - 1) / 2);
    snprintf(l->counter, sizeof l->counter, "memory (%s)", l->name);
    t->lanes[i] = l;
  }
  for (int i = 0; t->lanes && i < t->n_lanes; i++)
    if (!t->lanes[i]) {
      gt_trace_destroy(t);
      return gt_err_set(err, GT_ERR_NOMEM, "trace: no memory for %d lanes", 2 + 2 * n_devices);
    }
  if (!t->lanes) {
    free(t);
    return gt_err_set(err, GT_ERR_NOMEM, "trace: no memory");
  }
  *out = t;
  return GT_OK;
}

void gt_trace_destroy(gt_trace *t) {
  if (!t) return;
  for (int i = 0; t->lanes && i < t->n_lanes; i++) {
    gt_trace_lane *l = t->lanes[i];
    if (!l) continue;
    for (gt__chunk *c = l->head, *nx; c; c = nx) {
      nx = c->next;
      free(c);
    }
    free(l);
  }
  free(t->lanes);
  free(t);
}

int gt_trace_devices(const gt_trace *t) { return t ? t->n_dev : 0; }
gt_trace_lane *gt_trace_host(gt_trace *t) { return t ? t->lanes[0] : NULL; }
gt_trace_lane *gt_trace_device(gt_trace *t, int d) { return t && d >= 0 && d < t->n_dev ? t->lanes[1 + 2 * d] : NULL; }
gt_trace_lane *gt_trace_comm(gt_trace *t, int d) { return t && d >= 0 && d < t->n_dev ? t->lanes[2 + 2 * d] : NULL; }
gt_trace_lane *gt_trace_writer(gt_trace *t) { return t ? t->lanes[t->n_lanes - 1] : NULL; }

/* Monotone in t, so spans recorded on one thread keep their nesting. */
static int64_t gt__ns(const gt_trace_lane *l, double t) { return llround((t - l->origin) * 1e9); }

/* The next free event of the lane, or NULL (bound reached, or no memory). */
static gt__ev *gt__push(gt_trace_lane *l) {
  if (l->n >= l->max) {
    l->dropped++;
    return NULL;
  }
  if (!l->tail || l->tail->n == GT_TRACE_CHUNK) {
    gt__chunk *c = malloc(sizeof *c);
    if (!c) {
      l->dropped++;
      return NULL;
    }
    c->next = NULL;
    c->n = 0;
    if (l->tail)
      l->tail->next = c;
    else
      l->head = c;
    l->tail = c;
  }
  l->n++;
  gt__ev *e = &l->tail->ev[l->tail->n++];
  e->name = e->cat = e->arg_name = e->group = NULL;
  e->keys = NULL;
  e->arg = 0;
  e->n = 0;
  return e;
}

static gt__ev *gt__span(gt_trace_lane *l, int kind, const char *cat, double t0, double t1) {
  gt__ev *e = gt__push(l);
  if (!e) return NULL;
  e->kind = kind;
  e->ts = gt__ns(l, t0);
  e->dur = gt__ns(l, t1) - e->ts;
  e->cat = cat;
  return e;
}

void gt_trace_span(gt_trace_lane *l, const char *name, const char *cat, double t0, double t1) {
  gt_trace_span_arg(l, name, cat, t0, t1, NULL, 0, NULL);
}

void gt_trace_span_arg(gt_trace_lane *l, const char *name, const char *cat, double t0, double t1,
                       const char *arg_name, int64_t arg, const char *group) {
  if (!l) return;
  gt__ev *e = gt__span(l, GT__EV_SPAN, cat, t0, t1);
  if (!e) return;
  e->name = name;
  e->arg_name = arg_name;
  e->arg = arg;
  e->group = group;
}

void gt_trace_span_text(gt_trace_lane *l, const char *text, const char *cat, double t0, double t1,
                        const char *arg_name, int64_t arg) {
  if (!l) return;
  gt__ev *e = gt__span(l, GT__EV_TEXT, cat, t0, t1);
  if (!e) return;
  snprintf(e->u.text, sizeof e->u.text, "%s", text);
  e->arg_name = arg_name;
  e->arg = arg;
}

void gt_trace_stmt(gt_trace_lane *l, const char *stmt, const char *cat, double t0, double t1) {
  if (!l) return;
  gt__ev *e = gt__span(l, GT__EV_STMT, cat, t0, t1);
  if (e) e->name = stmt;
}

void gt_trace_phase_end(gt_trace_lane *l, double now) {
  if (!l || !l->phase_open) return;
  l->phase_open = 0;
  gt_trace_span_text(l, l->phase, "layer", l->phase_t0, now, NULL, 0);
}

void gt_trace_phase(gt_trace_lane *l, const char *text, double now) {
  if (!l) return;
  gt_trace_phase_end(l, now);
  snprintf(l->phase, sizeof l->phase, "%s", text);
  l->phase_t0 = now;
  l->phase_open = 1;
}

void gt_trace_counter(gt_trace_lane *l, const char *name, double t, int n, const char *const *keys,
                      const int64_t *vals) {
  if (!l) return;
  gt__ev *e = gt__push(l);
  if (!e) return;
  e->kind = GT__EV_COUNTER;
  e->ts = gt__ns(l, t);
  e->dur = 0;
  e->name = name;
  e->keys = keys;
  e->n = n < 0 ? 0 : n > GT__NSERIES ? GT__NSERIES : n;
  memcpy(e->u.v, vals, (size_t)e->n * sizeof(int64_t));
}

/* ---------- memory counters through a gt_mem probe ---------- */

static const char *const gt__mem_keys[GT__NSERIES] = {"params", "grads", "optimizer", "saved_activations",
                                                      "temporaries", "logits", "gathered_weights", "other"};

static void gt__mem_sample(gt_trace_lane *l) {
  const gt_mem *m = l->mem;
  int64_t v[GT__NSERIES];
  for (int c = 0; c < 7; c++) v[c] = gt_mem_cur(m, (gt_mem_cat)c);
  v[0] += gt_mem_cur(m, GT_MEM_FROZEN); /* the parameters series: trainable and frozen */
  /* everything else the device total counts (not the host pool) */
  v[7] = gt_mem_cur(m, GT_MEM_DATA) + gt_mem_cur(m, GT_MEM_KVCACHE) + gt_mem_cur(m, GT_MEM_OTHER);
  gt_trace_counter(l, l->counter, gt_prof_now(), GT__NSERIES, gt__mem_keys, v);
}

static void gt__on_mem(void *ctx, const void *p, gt_mem_cat cat, size_t bytes, const char *name) {
  if (cat != GT_MEM_HOST) gt__mem_sample(ctx);
}

static void gt__on_phase(void *ctx, const char *phase) { gt_trace_phase(ctx, phase, gt_prof_now()); }

void gt_trace_watch_mem(gt_trace_lane *l, gt_mem *m) {
  if (!l) {
    gt_mem_set_probe(m, NULL);
    return;
  }
  l->mem = m;
  gt_mem_probe p = {l, gt__on_mem, gt__on_mem, gt__on_phase};
  gt_mem_set_probe(m, &p);
  gt__mem_sample(l);
}

int64_t gt_trace_events(const gt_trace *t) {
  int64_t n = 0;
  for (int i = 0; t && i < t->n_lanes; i++) n += t->lanes[i]->n;
  return n;
}

int64_t gt_trace_dropped(const gt_trace *t) {
  int64_t n = 0;
  for (int i = 0; t && i < t->n_lanes; i++) n += t->lanes[i]->dropped;
  return n;
}

/* ---------- writing ---------- */

typedef struct gt__out {
  FILE *f;
  int bad; /* a write failed */
} gt__out;

static void gt__put(gt__out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gt__put(gt__out *o, const char *fmt, ...) {
  if (o->bad) return;
  va_list ap;
  va_start(ap, fmt);
  if (vfprintf(o->f, fmt, ap) < 0) o->bad = 1;
  va_end(ap);
}

/* A JSON string body: names are ours, but a phase or run name may hold
 * anything. */
static void gt__str(gt__out *o, const char *s, size_t n) {
  gt__put(o, "\"");
  for (size_t i = 0; i < n && s[i]; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      gt__put(o, "\\%c", c);
    else if (c < 0x20)
      gt__put(o, "\\u%04x", c);
    else
      gt__put(o, "%c", c);
  }
  gt__put(o, "\"");
}

/* The function a timed statement calls: the identifier before its first
 * '(' (after "x = "), without the gt_ / gt__ prefix. */
static void gt__stmt_name(const char *stmt, const char **s, size_t *n) {
  const char *p = strchr(stmt, '(');
  if (!p) {
    *s = stmt;
    *n = strlen(stmt);
    return;
  }
  const char *b = p;
  while (b > stmt && (b[-1] == '_' || (b[-1] >= 'a' && b[-1] <= 'z') || (b[-1] >= 'A' && b[-1] <= 'Z') ||
                      (b[-1] >= '0' && b[-1] <= '9')))
    b--;
  if (!strncmp(b, "gt__", 4))
    b += 4;
  else if (!strncmp(b, "gt_", 3))
    b += 3;
  *s = b;
  *n = (size_t)(p - b);
}

/* ns as microseconds with three decimals: exact, so nesting survives */
static void gt__us(gt__out *o, const char *key, int64_t ns) {
  const char *sign = ns < 0 ? "-" : "";
  int64_t a = ns < 0 ? -ns : ns;
  gt__put(o, ",\"%s\":%s%lld.%03lld", key, sign, (long long)(a / 1000), (long long)(a % 1000));
}

static void gt__event(gt__out *o, const gt_trace_lane *l, const gt__ev *e) {
  gt__put(o, ",\n{\"name\":");
  if (e->kind == GT__EV_TEXT) {
    gt__str(o, e->u.text, sizeof e->u.text);
  } else if (e->kind == GT__EV_STMT) {
    const char *s;
    size_t n;
    gt__stmt_name(e->name, &s, &n);
    gt__str(o, s, n);
  } else {
    gt__str(o, e->name ? e->name : "?", (size_t)-1);
  }
  if (e->kind == GT__EV_COUNTER) {
    gt__put(o, ",\"ph\":\"C\",\"pid\":1,\"tid\":%d", l->tid);
    gt__us(o, "ts", e->ts);
    gt__put(o, ",\"args\":{");
    for (int i = 0; i < e->n; i++) gt__put(o, "%s\"%s\":%lld", i ? "," : "", e->keys[i], (long long)e->u.v[i]);
    gt__put(o, "}}");
    return;
  }
  gt__put(o, ",\"cat\":");
  gt__str(o, e->cat ? e->cat : "", (size_t)-1);
  gt__put(o, ",\"ph\":\"X\",\"pid\":1,\"tid\":%d", l->tid);
  gt__us(o, "ts", e->ts);
  gt__us(o, "dur", e->dur);
  if (e->arg_name || e->group) {
    gt__put(o, ",\"args\":{");
    if (e->arg_name) gt__put(o, "\"%s\":%lld", e->arg_name, (long long)e->arg);
    if (e->group) gt__put(o, "%s\"group\":\"%s\"", e->arg_name ? "," : "", e->group);
    gt__put(o, "}");
  }
  gt__put(o, "}");
}

gt_rc gt_trace_write(gt_trace *t, const char *path, const char *process, const char *other, gt_err *err) {
  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
    return gt_err_set(err, GT_ERR_IO, "trace: path '%s' is too long", path);
  gt__out o = {fopen(tmp, "w"), 0};
  if (!o.f) return gt_err_set(err, GT_ERR_IO, "trace: cannot create '%s'", tmp);
  gt__put(&o, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"events\":%lld,\"dropped_events\":%lld%s%s},\n",
          (long long)gt_trace_events(t), (long long)gt_trace_dropped(t), other && other[0] ? "," : "",
          other ? other : "");
  gt__put(&o, "\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":");
  gt__str(&o, process ? process : "gemtrain", (size_t)-1);
  gt__put(&o, "}}");
  for (int i = 0; i < t->n_lanes; i++) {
    const gt_trace_lane *l = t->lanes[i];
    if (i == t->n_lanes - 1 && !l->n) continue; /* the checkpoint writer's, when it wrote nothing */
    gt__put(&o, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", l->tid,
            l->name);
    gt__put(&o, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
            l->tid, l->sort);
  }
  for (int i = 0; i < t->n_lanes; i++)
    for (const gt__chunk *c = t->lanes[i]->head; c; c = c->next)
      for (int k = 0; k < c->n; k++) gt__event(&o, t->lanes[i], &c->ev[k]);
  gt__put(&o, "\n]}\n");
  int bad = o.bad || ferror(o.f);
  if (fclose(o.f) != 0) bad = 1;
  if (bad) {
    remove(tmp);
    return gt_err_set(err, GT_ERR_IO, "trace: could not write '%s' (disk full?)", tmp);
  }
  if (rename(tmp, path) != 0) {
    remove(tmp);
    return gt_err_set(err, GT_ERR_IO, "trace: could not rename '%s' to '%s'", tmp, path);
  }
  return GT_OK;
}
