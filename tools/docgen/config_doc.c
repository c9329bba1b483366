/* gemtrain_docgen: writes docs/configuration.md from the config key table.
 *
 * The key table in src/config/config.c is the one place that knows every
 * key's type, range and meaning, and configs/base.json holds the defaults;
 * generating the page from both (instead of writing it by hand) is what keeps
 * it from drifting. The test docs_configuration_current fails when the
 * committed page differs from this program's output.
 *
 *   gemtrain_docgen CONFIG_DIR [OUT_FILE]     (no OUT_FILE: standard output)
 */
#include "config/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table itself has no group field, only comments, so the groups are
 * named here by the key that opens each one, in table order. A key belongs
 * to the last group opened before it; a group whose opening key is no longer
 * in the table stops the generator, so a rename cannot silently merge two
 * groups. */
typedef struct doc_group {
  const char *first_key;
  const char *title;
  const char *see;       /* the docs page that explains the group, or NULL */
  const char *see_title; /* its link text */
} doc_group;

static const doc_group groups[] = {
    {"model_name", "Run", "training.md", "Training"},
    {"enable_checkpointing", "Checkpoints", "checkpoints.md", "Checkpoints and resume"},
    {"decoder_block", "Model", "model.md", "The model"},
    {"global_head_dim", "Gemma 4 layers", "gemma4.md", "Gemma 4"},
    {"num_experts", "Gemma 4 mixture of experts", "gemma4.md#mixture-of-experts", "Gemma 4: mixture of experts"},
    {"weight_init_scale", "Initialisation and dtypes", NULL, NULL},
    {"per_device_batch_size", "Batch and sequence", "training.md#loss", "Training: loss"},
    {"remat_policy", "Remat and memory", "memory-plan.md", "Remat and the memory plan"},
    {"opt_type", "Optimizer", "training.md#optimizer", "Training: optimizer"},
    {"dataset_type", "Data", "training.md#data", "Training: data"},
    {"golden_logits_path", "Checking logits (gemtrain logit-check)", "huggingface.md#the-logit-checker",
     "The logit checker"},
    {"sample_tokens", "End-of-run sample", "decoding.md", "Decoding"},
    {"prompt", "Decoding (gemtrain decode)", "decoding.md", "Decoding"},
    {"num_devices", "Devices", "sharding.md", "Sharded workers"},
};
#define N_GROUPS ((int)(sizeof groups / sizeof groups[0]))

static const char *type_name(gt_key_type t) {
  switch (t) {
    case GT_KEY_INT: return "int";
    case GT_KEY_FLOAT: return "float";
    case GT_KEY_BOOL: return "bool";
    case GT_KEY_STR: return "string";
    case GT_KEY_ENUM: return "enum";
  }
  return "?";
}

/* Markdown table cells: '|' would end the cell, '<' would open an HTML tag,
 * '*' could start emphasis. */
static void put_cell(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
      case '|': fputs("\\|", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '*': fputs("\\*", f); break;
      default: fputc(*s, f);
    }
  }
}

/* A value in code spans: only '|' needs escaping inside a table. */
static void put_code(FILE *f, const char *s) {
  if (!*s) {
    fputs("`\"\"`", f);
    return;
  }
  fputc('`', f);
  for (; *s; s++) {
    if (*s == '|') fputc('\\', f);
    fputc(*s, f);
  }
  fputc('`', f);
}

/* gt_config_get_text prints floats with 17 digits so that they round-trip;
 * the page shows the shortest text that still reads back as the same double
 * (0.1, not 0.10000000000000001; whole numbers in full, as base.json writes them). */
static void shorten_float(char *text, size_t n) {
  double v = strtod(text, NULL);
  if (v == (double)(long long)v && v > -1e15 && v < 1e15) { /* 1000000, not 1e+06 */
    snprintf(text, n, "%lld", (long long)v);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) {
      snprintf(text, n, "%s", buf);
      return;
    }
  }
}

/* The same form as the loader's range messages ("allowed: 1 .. 1e+12"). */
static void num_text(double v, char *buf, size_t n) {
  snprintf(buf, n, (v >= 1e12 || v <= -1e12) ? "%g" : "%.10g", v);
}

static void put_allowed(FILE *f, const gt_key_spec *k) {
  char lo[32], hi[32];
  switch (k->type) {
    case GT_KEY_INT:
    case GT_KEY_FLOAT:
      num_text(k->min, lo, sizeof lo);
      num_text(k->max, hi, sizeof hi);
      fprintf(f, "%s .. %s", lo, hi);
      break;
    case GT_KEY_BOOL: fputs("`true`, `false`", f); break;
    case GT_KEY_ENUM:
      for (const char *p = k->choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        fprintf(f, "%s`%.*s`", p == k->choices ? "" : ", ", (int)len, p);
        p += len + (bar ? 1 : 0);
      }
      break;
    case GT_KEY_STR: fputs("text", f); break;
  }
}

static int group_opened_by(const char *key) {
  for (int g = 0; g < N_GROUPS; g++)
    if (!strcmp(groups[g].first_key, key)) return g;
  return -1;
}

/* GitHub's heading anchors: lower case, spaces to '-', punctuation dropped. */
static void put_anchor(FILE *f, const char *title) {
  for (const char *p = title; *p; p++) {
    if (*p == ' ')
      fputc('-', f);
    else if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_')
      fputc(*p, f);
    else if (*p >= 'A' && *p <= 'Z')
      fputc(*p - 'A' + 'a', f);
  }
}

static int write_doc(FILE *f, const gt_config *defaults) {
  int n = gt_config_num_keys();
  if (n <= 0 || group_opened_by(gt_config_key_at(0)->name) != 0) {
    fprintf(stderr, "gemtrain_docgen: the key table must start with '%s' (group '%s'); it starts with '%s'\n",
            groups[0].first_key, groups[0].title, n > 0 ? gt_config_key_at(0)->name : "(no keys)");
    return 1;
  }
  for (int g = 0; g < N_GROUPS; g++)
    if (!gt_config_key(groups[g].first_key)) {
      fprintf(stderr,
              "gemtrain_docgen: group '%s' opens at key '%s', which the key table no longer has; "
              "update groups[] in tools/docgen/config_doc.c\n",
              groups[g].title, groups[g].first_key);
      return 1;
    }

  fputs("<!-- Generated by gemtrain_docgen (tools/docgen/config_doc.c) from the key table in\n"
        "     src/config/config.c and configs/base.json. Do not edit: change the table or\n"
        "     base.json, then run `cmake --build build --target docs`. -->\n\n",
        f);
  fputs("# Configuration keys\n\n", f);
  fprintf(f,
          "Every key gemtrain knows, %d in all, in the order of the key table. How the layers "
          "(base.json, the preset, a user file, `key=value`) combine and what a refusal looks like "
          "are in [Training](training.md#configuration-layers); the presets are in "
          "[The model](model.md#presets).\n\n",
          n);
  fprintf(f,
          "**Default** is the value `gemtrain train` runs with when given no arguments: "
          "`configs/base.json` with its preset, `%s`, applied on top, so the model keys show "
          "that preset's values. `gemtrain train --help` prints the same table; "
          "`dump_config=true` prints a resolved configuration.\n\n",
          defaults->model_name);
  fputs("Groups:", f);
  for (int g = 0; g < N_GROUPS; g++) {
    fprintf(f, "%s [%s](#", g ? "," : "", groups[g].title);
    put_anchor(f, groups[g].title);
    fputs(")", f);
  }
  fputs(".\n", f);

  for (int i = 0; i < n; i++) {
    const gt_key_spec *k = gt_config_key_at(i);
    int g = group_opened_by(k->name);
    if (g >= 0) {
      fprintf(f, "\n## %s\n\n", groups[g].title);
      if (groups[g].see) fprintf(f, "See [%s](%s).\n\n", groups[g].see_title, groups[g].see);
      fputs("| key | type | default | allowed | description |\n|---|---|---|---|---|\n", f);
    }
    char value[GT_STR_PATH + 32];
    gt_err err = {0};
    if (gt_config_get_text(defaults, k->name, value, sizeof value, &err) != GT_OK) {
      fprintf(stderr, "gemtrain_docgen: %s\n", err.msg);
      return 1;
    }
    if (k->type == GT_KEY_FLOAT) shorten_float(value, sizeof value);
    fprintf(f, "| `%s` | %s | ", k->name, type_name(k->type));
    put_code(f, value);
    fputs(" | ", f);
    put_allowed(f, k);
    fputs(" | ", f);
    put_cell(f, k->desc);
    fputs(" |\n", f);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3 || !strcmp(argv[1], "--help")) {
    fprintf(argc < 2 || argc > 3 ? stderr : stdout,
            "usage: gemtrain_docgen CONFIG_DIR [OUT_FILE]\n"
            "writes the configuration reference (docs/configuration.md) from the key table and\n"
            "CONFIG_DIR/base.json; without OUT_FILE to standard output\n");
    return argc < 2 || argc > 3 ? 2 : 0;
  }
  gt_config cfg;
  gt_err err = {0};
  if (gt_config_load(&cfg, argv[1], NULL, 0, NULL, &err) != GT_OK) {
    fprintf(stderr, "gemtrain_docgen: %s\n", err.msg);
    return 1;
  }
  if (argc == 2) return write_doc(stdout, &cfg) || fflush(stdout) != 0;

  /* Write beside the target and rename, so a failed run never leaves a
   * half-written page in the source tree. */
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]) >= (int)sizeof tmp) {
    fprintf(stderr, "gemtrain_docgen: output path '%s' is too long\n", argv[2]);
    return 1;
  }
  FILE *f = fopen(tmp, "w");
  if (!f) {
    perror(tmp);
    return 1;
  }
  int bad = write_doc(f, &cfg);
  bad = (fclose(f) != 0) || bad;
  if (bad || rename(tmp, argv[2]) != 0) {
    if (!bad) perror(argv[2]);
    remove(tmp);
    return 1;
  }
  return 0;
}
