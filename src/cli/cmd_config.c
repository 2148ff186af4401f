/* vfm config: `show` prints the merged configuration as YAML, `keys` prints the key registry
 * (as a text table, or Markdown for docs/config.md). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "core/config.h"

static const char *const k_config_usage = "config show [--config FILE] [a.b.c=value ...]\n"
                                          "       vfm config keys [--markdown]";
static const char *const k_config_about =
    "show: merge defaults, model.preset, the YAML file and a.b.c=value overrides (in that order)\n"
    "      and print the result as YAML (every key; unused DFM keys commented out unless set).\n"
    "keys: list every configuration key with its type, default, allowed values and meaning.\n"
    "Bad keys or values are reported on one line (exit 2). See docs/config.md.";

static int config_show(int argc, char **argv) {
    ArgFlag flags[] = {{.name = "--config", .metavar = "FILE", .help = "YAML config file"}};
    int nflags = (int)(sizeof flags / sizeof flags[0]);
    ArgList overrides;
    int want_help;
    vfm_status s = args_parse("config show", argc, argv, flags, nflags, &overrides, &want_help);
    if (s != VFM_OK) return cli_report(s);
    if (want_help) {
        args_print_help("config show [--config FILE] [a.b.c=value ...]",
                        "Prints the merged configuration (defaults -> model.preset -> FILE -> overrides) as YAML.",
                        flags, nflags);
        return 0;
    }
    Config *cfg;
    s = config_load(&cfg, args_value(flags, nflags, "--config", NULL), overrides.items, overrides.n);
    if (s != VFM_OK) return cli_report(s);
    s = config_write_yaml(cfg, stdout);
    config_free(cfg);
    return cli_report(s);
}

/* Writes s with '|' escaped (a Markdown table cell). */
static void markdown_cell(const char *s) {
    fputs("| ", stdout);
    for (; *s; s++) {
        if (*s == '|') fputc('\\', stdout);
        fputc(*s, stdout);
    }
    fputc(' ', stdout);
}

static int config_keys(int argc, char **argv) {
    ArgFlag flags[] = {{.name = "--markdown", .help = "print a Markdown table (for docs/config.md)"}};
    int nflags = (int)(sizeof flags / sizeof flags[0]);
    ArgList extra;
    int want_help;
    vfm_status s = args_parse("config keys", argc, argv, flags, nflags, &extra, &want_help);
    if (s != VFM_OK) return cli_report(s);
    if (want_help) {
        args_print_help("config keys [--markdown]", "Lists every configuration key: name, type, default, allowed "
                        "values, meaning.", flags, nflags);
        return 0;
    }
    if (extra.n > 0) {
        fprintf(stderr, "vfm config keys: unexpected argument '%s'\n", extra.items[0]);
        return 2;
    }
    int n = config_registry_count();
    CfgKeyInfo info;
    if (args_flag(flags, nflags, "--markdown")->present) {
        printf("| key | type | default | allowed | on resume | meaning |\n|---|---|---|---|---|---|\n");
        for (int i = 0; i < n; i++) {
            config_registry_key(i, &info);
            char name[160], def[160];
            snprintf(name, sizeof name, "`%s`%s", info.name, info.unused ? " \\*" : "");
            snprintf(def, sizeof def, "`%s`", info.default_text);
            markdown_cell(name);
            markdown_cell(info.type_name);
            markdown_cell(def);
            markdown_cell(info.allowed);
            markdown_cell(config_resume_class_name(info.resume));
            markdown_cell(info.help);
            printf("|\n");
        }
        return 0;
    }
    int wname = 3, wtype = 4, wdef = 7, wallowed = 7;
    for (int i = 0; i < n; i++) {
        config_registry_key(i, &info);
        int ln = (int)strlen(info.name), lt = (int)strlen(info.type_name), ld = (int)strlen(info.default_text),
            la = (int)strlen(info.allowed);
        if (ln > wname) wname = ln;
        if (lt > wtype) wtype = lt;
        if (ld > wdef) wdef = ld;
        if (la > wallowed) wallowed = la;
    }
    printf("%-*s  %-*s  %-*s  %-*s  %s\n", wname, "KEY", wtype, "TYPE", wdef, "DEFAULT", wallowed, "ALLOWED", "MEANING");
    for (int i = 0; i < n; i++) {
        config_registry_key(i, &info);
        printf("%-*s  %-*s  %-*s  %-*s  %s\n", wname, info.name, wtype, info.type_name, wdef, info.default_text,
               wallowed, info.allowed, info.help);
    }
    return 0;
}

int cmd_config(int argc, char **argv) {
    const char *sub = argc > 0 ? argv[0] : NULL;
    if (sub && strcmp(sub, "show") == 0) return config_show(argc - 1, argv + 1);
    if (sub && strcmp(sub, "keys") == 0) return config_keys(argc - 1, argv + 1);
    if (sub && (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0)) {
        printf("usage: vfm %s\n\n%s\n", k_config_usage, k_config_about);
        return 0;
    }
    if (sub) fprintf(stderr, "vfm config: unknown subcommand '%s' (expected show or keys; see vfm config --help)\n", sub);
    else fprintf(stderr, "vfm config: expected a subcommand: show or keys (see vfm config --help)\n");
    return 2;
}
