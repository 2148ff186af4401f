/* The subcommands of vfm: each is a function taking the arguments after its name and returning
 * a process exit code (0 ok, 1 failure, 2 usage or config error). */
#ifndef VFM_COMMANDS_H
#define VFM_COMMANDS_H

typedef int (*CommandFn)(int argc, char **argv);

typedef struct {
    const char *name;
    const char *summary;
    CommandFn run;
} Command;

int vfm_main(int argc, char **argv);
const Command *vfm_commands(int *count);

int cmd_version(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_model(int argc, char **argv);
int cmd_model_forward(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_checkpoint(int argc, char **argv);

/* Prints "vfm: <message>" for a failed status and returns its exit code. */
int cli_report(int status);

#endif
