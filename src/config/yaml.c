/* The YAML that MaxText's config files use, read into the same cJSON object
 * a JSON config file gives, so every later check is the JSON one.
 *
 * The subset: one `key: value` per line at the left margin; `#` comments
 * (a whole line, or after a space); plain, 'single' ('' is a quote) and
 * "double" (\" \\ \n \t) quoted scalars; a flow list `[a, 'b', 3]` on one
 * line, or a block list of `- item` lines under a bare `key:`. A nested
 * value (a list of lists, a map, a list over several lines) is kept as an
 * empty object: only a key judged by its name alone takes one (MaxText's
 * logical_axis_rules, accepted with no effect). Scalars stay
 * text (the key table parses them; YAML's own typing would turn `1e-4`
 * into a string and `010` into 8), except that a number written with '_'
 * separators (YAML 1.1's 10_000) loses them; a quoted scalar is always a
 * string. `null`, `~` and a bare `key:` are an empty value (`None` is
 * text to YAML; the key table reads it as null for a key whose MaxText
 * default is None). A `...` ends the
 * document. Anything else (anchors, block scalars, several documents, a
 * plain value YAML would read as a mapping or a list entry) is refused at
 * its line rather than guessed at. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "config/yaml.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

typedef struct gt__yl {
  const char *path;
  int line;
  gt_err *err;
  const char *key; /* the key whose value (or list) is being read */
} gt__yl;

/* Puts v where old is, under old's key (old is freed). */
static void gt__yreplace(cJSON *obj, cJSON *old, cJSON *v) {
  char *key = strdup(old->string);
  if (key) cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v);
  else cJSON_Delete(v);
  free(key);
}

static gt_rc gt__yfail(const gt__yl *y, const char *why) {
  return gt_err_set(y->err, GT_ERR_CONFIG, "config: '%s' line %d: %s (the YAML read here is flat key: value lines, "
                    "with lists of scalars)", y->path, y->line, why);
}

/* Whether the quote at p opens a quoted scalar: it starts the line, or
 * follows (blanks aside) a "key:", a flow list's '[' or ',', or a block
 * list's '-'. Elsewhere (bob's_run) it is a character of a plain scalar. */
static int gt__yopens(const char *s, const char *p) {
  while (p > s && (p[-1] == ' ' || p[-1] == '\t')) p--;
  return p == s || p[-1] == ':' || p[-1] == '[' || p[-1] == ',' || p[-1] == '-';
}

/* Cuts a trailing comment (a '#' at the start or after a blank, outside
 * quoted scalars) and trailing blanks. */
static void gt__ystrip(char *s) {
  char q = 0;
  for (char *p = s; *p; p++) {
    if (q) {
      if (*p == '\\' && q == '"' && p[1]) p++;
      else if (*p == q) q = 0;
    } else if ((*p == '\'' || *p == '"') && gt__yopens(s, p)) {
      q = *p;
    } else if (*p == '#' && (p == s || isspace((unsigned char)p[-1]))) {
      *p = '\0';
      break;
    }
  }
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
}

/* A plain scalar YAML 1.1 reads as a decimal number written with '_'
 * between its digits (MaxText's files write 10_000 and 1_000_000): an
 * optional sign, digits and '_' (a digit first), optionally '.' and more,
 * optionally an exponent. Only such a scalar with a '_' in it. */
static int gt__ynum_sep(const char *s) {
  const char *p = s;
  if (*p == '+' || *p == '-') p++;
  if (!isdigit((unsigned char)*p)) return 0;
  while (isdigit((unsigned char)*p) || *p == '_') p++;
  if (*p == '.')
    for (p++; isdigit((unsigned char)*p) || *p == '_';) p++;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (!isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) p++;
  }
  return !*p && strchr(s, '_');
}

/* One scalar starting at *p (blanks skipped), up to `stop` characters
 * (",]" in a flow list, "" on a line of its own): a cJSON string, or null.
 * Advances *p past it. */
static gt_rc gt__yscalar(const gt__yl *y, char **p, const char *stop, cJSON **out) {
  char *s = *p;
  while (*s == ' ' || *s == '\t') s++;
  char buf[GT_STR_PATH + 64];
  size_t n = 0;
  int quoted = 0;
  if (*s == '\'' || *s == '"') {
    char q = *s++;
    quoted = 1;
    for (;; s++) {
      if (!*s) return gt__yfail(y, "a quoted value has no closing quote");
      if (*s == q) {
        if (q == '\'' && s[1] == '\'') {
          s++;
        } else {
          s++;
          break;
        }
      } else if (q == '"' && *s == '\\') {
        s++;
        /* a backslash that ends the line escapes nothing: strchr would
         * match the terminator, and the loop would step past it */
        if (!*s) return gt__yfail(y, "a quoted value has no closing quote");
        char c = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
        if (!strchr("nt\"\\/", *s)) return gt__yfail(y, "an escape other than \\\" \\\\ \\n \\t in a quoted value");
        if (n + 1 < sizeof buf) buf[n++] = c;
        continue;
      }
      if (n + 1 < sizeof buf) buf[n++] = *s;
    }
    while (*s == ' ' || *s == '\t') s++;
    if (*s && !strchr(stop, *s)) return gt__yfail(y, "text after a quoted value");
  } else {
    while (*s && !strchr(stop, *s)) {
      if (n + 1 < sizeof buf) buf[n++] = *s;
      s++;
    }
    while (n && isspace((unsigned char)buf[n - 1])) n--;
  }
  if (n + 1 >= sizeof buf) return gt__yfail(y, "a value too long");
  buf[n] = '\0';
  *p = s;
  if (!quoted && (!strcmp(buf, "null") || !strcmp(buf, "~") || !strcmp(buf, "Null") || !strcmp(buf, "NULL")))
    buf[0] = '\0'; /* YAML's null: no value, as an empty string is here */
  else if (!quoted && gt__ynum_sep(buf)) {
    /* the number it is in YAML 1.1 (and to MaxText), without the '_'; a
     * text key keeps what it reads as text, so there the form is refused */
    const gt_key_spec *k = y->key ? gt_config_key(y->key) : NULL;
    if (k && (k->type == GT_KEY_STR || k->type == GT_KEY_ENUM))
      return gt__yfail(y, "a plain value YAML reads as a number written with '_' separators, for a key that holds "
                          "text; quote it");
    size_t j = 0;
    for (size_t i = 0; buf[i]; i++)
      if (buf[i] != '_') buf[j++] = buf[i];
    buf[j] = '\0';
  }
  else if (!quoted && n && strchr("{[&*!|>%@`", buf[0]))
    return gt__yfail(y, "a value of a kind not read here");
  /* YAML reads these as structure, not text (PyYAML refuses them here):
   * taking them as a string would give a value no other reader sees */
  else if (!quoted && n && (strstr(buf, ": ") || buf[n - 1] == ':'))
    return gt__yfail(y, "a plain value with ': ' in it or ':' at its end, which YAML reads as a mapping; quote it");
  else if (!quoted && (buf[0] == '-' || buf[0] == '?') && (n == 1 || buf[1] == ' '))
    return gt__yfail(y, buf[0] == '-' ? "a plain value starting with '- ', which YAML reads as a list entry; quote it"
                                      : "a plain value starting with '? ', which YAML reads as a mapping key; quote it");
  *out = cJSON_CreateString(buf);
  return *out ? GT_OK : gt_err_set(y->err, GT_ERR_NOMEM, "config: no memory to read '%s'", y->path);
}

static gt_rc gt__yflow(const gt__yl *y, char *s, cJSON **out) {
  cJSON *a = cJSON_CreateArray();
  if (!a) return gt_err_set(y->err, GT_ERR_NOMEM, "config: no memory to read '%s'", y->path);
  s++; /* '[' */
  while (*s == ' ' || *s == '\t') s++;
  if (*s == ']') s++;
  else
    for (;;) {
      cJSON *e;
      gt_rc rc = gt__yscalar(y, &s, ",]", &e);
      if (rc) {
        cJSON_Delete(a);
        return rc;
      }
      cJSON_AddItemToArray(a, e);
      if (*s == ',') {
        s++;
        continue;
      }
      if (*s == ']') {
        s++;
        break;
      }
      cJSON_Delete(a);
      return gt__yfail(y, "a list that does not close on its line");
    }
  while (*s == ' ' || *s == '\t') s++;
  if (*s) {
    cJSON_Delete(a);
    return gt__yfail(y, "text after a list");
  }
  *out = a;
  return GT_OK;
}

/* A bare `key:` opened a list; no item followed: the key has no value, as an
 * empty string here (YAML's null). */
static gt_rc gt__yclose(cJSON *obj, cJSON **list, const char *path, gt_err *err) {
  cJSON *l = *list;
  *list = NULL;
  if (!l || l->child || cJSON_IsObject(l)) return GT_OK;
  cJSON *empty = cJSON_CreateString("");
  if (!empty) return gt_err_set(err, GT_ERR_NOMEM, "config: no memory to read '%s'", path);
  gt__yreplace(obj, l, empty);
  return GT_OK;
}

/* The bracket depth a line opens (negative: closes), outside quotes;
 * *nested: a bracket opened inside another. */
static int gt__ydepth(const char *s, int *nested) {
  int d = 0;
  char q = 0;
  *nested = 0;
  for (; *s; s++) {
    if (q) {
      if (*s == '\\' && q == '"' && s[1]) s++;
      else if (*s == q) q = 0;
    } else if (*s == '\'' || *s == '"') {
      q = *s;
    } else if (*s == '[' || *s == '{') {
      if (d > 0) *nested = 1;
      d++;
    } else if (*s == ']' || *s == '}') {
      d--;
    }
  }
  return d;
}

/* The bare key's value is nested (a list of lists, a map): an empty object
 * stands for it, which only a key judged by its name accepts. */
static gt_rc gt__yopaque(cJSON *obj, cJSON **list, const char *path, gt_err *err) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return gt_err_set(err, GT_ERR_NOMEM, "config: no memory to read '%s'", path);
  gt__yreplace(obj, *list, o);
  *list = o;
  return GT_OK;
}

gt_rc gt_config_parse_yaml(const char *text, size_t n, const char *path, cJSON **out, gt_err *err) {
  gt__yl y = {path, 0, err, NULL};
  if (memchr(text, '\0', n)) return gt_err_set(err, GT_ERR_CONFIG, "config: '%s' holds a NUL byte; not YAML", path);
  char *buf = malloc(n + 1);
  cJSON *obj = cJSON_CreateObject();
  if (!buf || !obj) {
    free(buf);
    cJSON_Delete(obj);
    return gt_err_set(err, GT_ERR_NOMEM, "config: no memory to read '%s'", path);
  }
  memcpy(buf, text, n);
  buf[n] = '\0';
  gt_rc rc = GT_OK;
  cJSON *list = NULL; /* the block list a bare `key:` opened */
  int ended = 0;      /* a '...' closed the document */
  char *line = buf;
  while (line && !rc) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    y.line++;
    size_t ln = strlen(line);
    if (ln && line[ln - 1] == '\r') line[--ln] = '\0';
    if (y.line == 1 && (unsigned char)line[0] == 0xEF && (unsigned char)line[1] == 0xBB &&
        (unsigned char)line[2] == 0xBF)
      line += 3; /* a byte-order mark */
    gt__ystrip(line);
    char *s = line;
    while (*s == ' ') s++;
    if (strchr(s, '\t') == s) {
      rc = gt__yfail(&y, "a tab as indentation (YAML allows spaces only)");
    } else if (!*s) {
      /* blank or comment */
    } else if (!strcmp(s, "---") && y.line == 1) {
      /* the document's start */
    } else if (!strcmp(s, "---") || (ended && strcmp(s, "..."))) {
      rc = gt__yfail(&y, ended && strcmp(s, "---") ? "text after the document's end ('...')" : "a second document");
    } else if (!strcmp(s, "...")) {
      /* the document's end: only comments, blank lines or another end
       * marker may follow */
      ended = 1;
    } else if (s[0] == '-' && (s[1] == ' ' || !s[1])) {
      if (!list) {
        rc = gt__yfail(&y, "a list item without a key above it");
      } else if (cJSON_IsArray(list)) {
        char *p = s + 1;
        cJSON *e = NULL;
        while (*p == ' ') p++;
        if (*p == '[' || *p == '{' || (*p == '-' && (p[1] == ' ' || !p[1])) ||
            (strstr(p, ": ") && *p != '\'' && *p != '"') || (p[0] && p[strlen(p) - 1] == ':'))
          rc = gt__yopaque(obj, &list, path, err);
        else if (!(rc = gt__yscalar(&y, &p, "", &e)))
          cJSON_AddItemToArray(list, e);
      }
    } else if (s != line) {
      /* under a bare `key:`, a nested map: opaque, as a nested list is */
      if (!list) rc = gt__yfail(&y, "an indented line under a key that has a value");
      else if (cJSON_IsArray(list)) rc = gt__yopaque(obj, &list, path, err);
    } else {
      /* key: value */
      char *colon = s;
      while (*colon && *colon != ':') colon++;
      if (!*colon || (colon[1] && colon[1] != ' ')) {
        rc = gt__yfail(&y, "expected 'key: value'");
      } else {
        *colon = '\0';
        char *key = s, *v = colon + 1;
        size_t kl = strlen(key);
        while (kl && key[kl - 1] == ' ') key[--kl] = '\0';
        while (*v == ' ') v++;
        y.key = key; /* (buf holds it until the end) */
        if (!kl || !(isalpha((unsigned char)key[0]) || key[0] == '_'))
          rc = gt__yfail(&y, "a key must be a plain name");
        else if (cJSON_GetObjectItemCaseSensitive(obj, key)) {
          rc = gt_err_set(err, GT_ERR_CONFIG, "config: key '%s' appears twice in '%s' (line %d); set each key once",
                          key, path, y.line);
        } else {
          cJSON *val = NULL;
          int depth = 0, nested = 0;
          rc = gt__yclose(obj, &list, path, err);
          if (rc) break;
          if (!*v) {
            /* a block list may follow; with none, the key is empty */
            val = list = cJSON_CreateArray();
            if (!val) rc = gt_err_set(err, GT_ERR_NOMEM, "config: no memory to read '%s'", path);
          } else if ((*v == '[' || *v == '{') && (depth = gt__ydepth(v, &nested)) == 0 && !nested && *v == '[') {
            rc = gt__yflow(&y, v, &val);
          } else if (*v == '[' || *v == '{') {
            /* nested, or spanning lines (MaxText's logical_axis_rules): kept
             * whole as an opaque value, judged by its key's name */
            while (depth > 0 && nl) {
              line = nl + 1;
              nl = strchr(line, '\n');
              if (nl) *nl = '\0';
              y.line++;
              gt__ystrip(line);
              int more_nested;
              depth += gt__ydepth(line, &more_nested);
            }
            if (depth > 0) rc = gt__yfail(&y, "a list or map that never closes");
            else if (!(val = cJSON_CreateObject())) rc = gt_err_set(err, GT_ERR_NOMEM, "config: no memory");
          } else {
            rc = gt__yscalar(&y, &v, "", &val);
          }
          if (!rc) cJSON_AddItemToObject(obj, key, val);
        }
      }
    }
    line = nl ? nl + 1 : NULL;
  }
  if (!rc) rc = gt__yclose(obj, &list, path, err);
  free(buf);
  if (rc) {
    cJSON_Delete(obj);
    return rc;
  }
  *out = obj;
  return GT_OK;
}

int gt_config_path_is_yaml(const char *path) {
  size_t n = path ? strlen(path) : 0;
  return (n > 4 && !strcmp(path + n - 4, ".yml")) || (n > 5 && !strcmp(path + n - 5, ".yaml"));
}
