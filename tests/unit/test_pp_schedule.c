/* Pipeline schedules: Megatron's 1F1B order (P = 4, M = 6 as its docstring draws it) and its
 * interleaved schedule table (PP2, M = 5, V = 2, groups of 3), the checker over every stage count,
 * micro-batch count (M < P, M = P, M = 2P+1, ...) and chunk count, broken schedules the checker
 * must reject (a receive moved first: deadlock; a message relabelled; a missing receive; a too-small
 * in-flight bound), the choice of the interleaving group, and the split of blocks over chunks and
 * of table entries over stages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pp_schedule.h"
#include "parallel/pp_stage.h"
#include "test.h"

/* The compute actions of a schedule as "F0 F1 B0 ..." (chunk shown when V > 1: "F0.1"). */
static void compute_order(const PpSchedule *s, char *out, size_t n) {
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < s->n_actions && at + 16 < n; i++) {
        const PpAction *a = &s->actions[i];
        if (a->kind == PP_COMM) continue;
        if (s->chunks > 1) at += (size_t)snprintf(out + at, n - at, "%s%c%d.%d", at ? " " : "", a->kind == PP_FORWARD ? 'F' : 'B', a->mb, a->chunk);
        else at += (size_t)snprintf(out + at, n - at, "%s%c%d", at ? " " : "", a->kind == PP_FORWARD ? 'F' : 'B', a->mb);
    }
}

/* Builds all P schedules and runs the checker; returns 1 when it passes. */
static int check_all(int P, int M, int V, int group, int bound_in_flight, char *err, size_t n) {
    PpSchedule *s = calloc((size_t)P, sizeof *s);
    const PpSchedule **ptr = calloc((size_t)P, sizeof *ptr);
    int *bound = calloc((size_t)P, sizeof *bound), ok = 1;
    for (int p = 0; p < P && ok; p++) {
        vfm_status st = V > 1 ? pp_schedule_interleaved(&s[p], P, M, V, group, p) : pp_schedule_1f1b(&s[p], P, M, p);
        if (st != VFM_OK) {
            snprintf(err, n, "build failed: %s", vfm_last_error());
            ok = 0;
        }
        ptr[p] = &s[p];
        /* 1F1B: min(P - p, M); interleaved: warmup + 1 (Megatron's max_outstanding_backprops) */
        int b = V > 1 ? s[p].warmup + 1 : (P - p < M ? P - p : M);
        if (b > M * V) b = M * V;
        bound[p] = bound_in_flight ? b : -1;
    }
    if (ok) ok = pp_schedule_check(ptr, bound, err, n);
    for (int p = 0; p < P; p++) pp_schedule_free(&s[p]);
    free(s), free(ptr), free(bound);
    return ok;
}

TEST(pp_1f1b_megatron_order) {
    /* Megatron's docstring, P = 4, M = 6 */
    const char *want[4] = {"F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5", "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5",
                           "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5", "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"};
    for (int p = 0; p < 4; p++) {
        PpSchedule s;
        REQUIRE_OK(pp_schedule_1f1b(&s, 4, 6, p));
        char got[512];
        compute_order(&s, got, sizeof got);
        CHECK_MSG(strcmp(got, want[p]) == 0, "stage %d: %s, want %s", p, got, want[p]);
        CHECK(s.warmup == 3 - p);
        pp_schedule_free(&s);
    }
    /* stage 1's communication: warmup receive/forward/send, then the batched steady steps */
    PpSchedule s;
    REQUIRE_OK(pp_schedule_1f1b(&s, 4, 6, 1));
    char text[4096];
    pp_schedule_format(&s, text, sizeof text);
    const char *head = "C recv_act m0 c0 <-0\nF m0 c0\nC send_act m0 c0 ->2\nC recv_act m1 c0 <-0\nF m1 c0\n"
                       "C send_act m1 c0 ->2\nC recv_act m2 c0 <-0\nF m2 c0\nC send_act m2 c0 ->2, recv_grad m0 c0 <-2\n"
                       "B m0 c0\nC send_grad m0 c0 ->0, recv_act m3 c0 <-0\n";
    CHECK_MSG(strncmp(text, head, strlen(head)) == 0, "stage 1 schedule starts:\n%.400s", text);
    pp_schedule_free(&s);
}

TEST(pp_1f1b_checked_for_every_shape) {
    char err[1024];
    for (int P = 1; P <= 5; P++)
        for (int M = 1; M <= 2 * P + 2; M++)
            CHECK_MSG(check_all(P, M, 1, 0, 1, err, sizeof err), "1F1B P=%d M=%d: %s", P, M, err);
}

TEST(pp_interleaved_megatron_table) {
    /* Megatron's example: PP2, M = 5, VP2, groups of 3: virtual steps
     * mb 0 1 2 0 1 2 3 4 3 4 / chunk 0 0 0 1 1 1 0 0 1 1 — the forward order of every stage */
    int G = 0;
    REQUIRE_OK(pp_interleave_group(2, 5, &G));
    CHECK(G == 3);
    const char *fwd = "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 F3.0 F4.0 F3.1 F4.1";
    for (int p = 0; p < 2; p++) {
        PpSchedule s;
        REQUIRE_OK(pp_schedule_interleaved(&s, 2, 5, 2, 0, p));
        CHECK(s.group == 3);
        CHECK(s.warmup == 2 * (1 - p) + 3);
        char all[1024], got[512] = "";
        compute_order(&s, all, sizeof all);
        for (char *tok = strtok(all, " "); tok; tok = strtok(NULL, " "))
            if (tok[0] == 'F') snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", got[0] ? " " : "", tok);
        CHECK_MSG(strcmp(got, fwd) == 0, "stage %d forwards: %s", p, got);
        pp_schedule_free(&s);
    }
    /* backward runs the chunks in reverse: stage 1 (last) starts with B0.1 right after its warmup */
    PpSchedule s;
    REQUIRE_OK(pp_schedule_interleaved(&s, 2, 4, 2, 0, 1));
    char got[512];
    compute_order(&s, got, sizeof got);
    CHECK_MSG(strcmp(got, "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0") == 0, "%s", got);
    pp_schedule_free(&s);
}

TEST(pp_interleaved_checked_for_every_shape) {
    char err[1024];
    for (int P = 2; P <= 4; P++)
        for (int V = 2; V <= 3; V++)
            for (int M = P; M <= 3 * P + 1; M++) {
                CHECK_MSG(check_all(P, M, V, 0, 1, err, sizeof err), "interleaved P=%d V=%d M=%d: %s", P, V, M, err);
                /* every group Megatron accepts works too */
                for (int G = P; G <= M; G++)
                    if (M % G == 0 || M % G >= P)
                        CHECK_MSG(check_all(P, M, V, G, 1, err, sizeof err), "interleaved P=%d V=%d M=%d G=%d: %s", P, V,
                                  M, G, err);
            }
}

/* Forward-only schedules (validation, sampling): every shape passes the checker, no backward, the
 * forwards in the training schedule's order. */
TEST(pp_forward_only_schedules) {
    char err[1024];
    for (int P = 1; P <= 4; P++)
        for (int V = 1; V <= 3; V++)
            for (int M = (V > 1 ? P : 1); M <= 2 * P + 2; M++) {
                if (V > 1 && P == 1) continue;
                PpSchedule s[4];
                const PpSchedule *ptr[4];
                int ok = 1;
                for (int p = 0; p < P; p++) {
                    if (pp_schedule_forward_only(&s[p], P, M, V, p) != VFM_OK) {
                        test_fail(__FILE__, __LINE__, "P=%d V=%d M=%d: %s", P, V, M, vfm_last_error());
                        ok = 0;
                    }
                    ptr[p] = &s[p];
                }
                if (ok) CHECK_MSG(pp_schedule_check(ptr, NULL, err, sizeof err), "forward only P=%d V=%d M=%d: %s", P, V, M, err);
                for (int p = 0; p < P && ok; p++) {
                    PpSchedule t;
                    REQUIRE_OK(pp_schedule_build(&t, P, M, V, p));
                    char a[2048], b[2048], fa[2048] = "";
                    compute_order(&t, a, sizeof a);
                    compute_order(&s[p], b, sizeof b);
                    for (char *tok = strtok(a, " "); tok; tok = strtok(NULL, " "))
                        if (tok[0] == 'F') snprintf(fa + strlen(fa), sizeof fa - strlen(fa), "%s%s", fa[0] ? " " : "", tok);
                    CHECK_MSG(strcmp(fa, b) == 0, "P=%d V=%d M=%d stage %d: %s vs %s", P, V, M, p, b, fa);
                    pp_schedule_free(&t);
                }
                for (int p = 0; p < P; p++) pp_schedule_free(&s[p]);
            }
}

TEST(pp_interleave_group_rules) {
    int G;
    const int cases[][3] = {{2, 2, 2}, {2, 4, 2}, {2, 5, 3}, {4, 8, 4}, {4, 9, 5}, {4, 5, 5}, {3, 7, 4}, {4, 6, 6}, {4, 10, 5}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        REQUIRE_OK(pp_interleave_group(cases[i][0], cases[i][1], &G));
        CHECK_MSG(G == cases[i][2], "P=%d M=%d: G=%d, want %d", cases[i][0], cases[i][1], G, cases[i][2]);
    }
    /* M < P: refused with the keys named */
    CHECK(pp_interleave_group(4, 3, &G) == VFM_ERR_USAGE);
    CHECK(strstr(vfm_last_error(), "model.virtual_pipeline_model_parallel_size") != NULL);
    PpSchedule s;
    CHECK(pp_schedule_interleaved(&s, 4, 3, 2, 0, 0) == VFM_ERR_USAGE);
    /* a group Megatron refuses (remainder 1 < P) */
    CHECK(pp_schedule_interleaved(&s, 2, 5, 2, 2, 0) == VFM_ERR_USAGE);
    /* no interleaving without a pipeline */
    CHECK(pp_schedule_build(&s, 1, 4, 2, 0) == VFM_ERR_USAGE);
    REQUIRE_OK(pp_schedule_build(&s, 1, 3, 1, 0));
    char got[128];
    compute_order(&s, got, sizeof got);
    CHECK_MSG(strcmp(got, "F0 B0 F1 B1 F2 B2") == 0, "%s", got);
    pp_schedule_free(&s);
}

/* Mutates stage p's schedule of a valid P = 3, M = 4 1F1B set and expects the checker to refuse. */
static void expect_broken(void (*mutate)(PpSchedule *), int p, const char *want) {
    PpSchedule s[3];
    const PpSchedule *ptr[3];
    for (int i = 0; i < 3; i++) {
        if (pp_schedule_1f1b(&s[i], 3, 4, i) != VFM_OK) test_fail(__FILE__, __LINE__, "build: %s", vfm_last_error());
        ptr[i] = &s[i];
    }
    mutate(&s[p]);
    char err[1024];
    int ok = pp_schedule_check(ptr, NULL, err, sizeof err);
    CHECK_MSG(!ok && strstr(err, want), "expected '%s', got %s", want, ok ? "a pass" : err);
    for (int i = 0; i < 3; i++) pp_schedule_free(&s[i]);
}

/* a cooldown receive of a gradient moved to the very start: the first stage waits for a gradient
 * while the next stage waits for its first activation */
static void recv_grad_first(PpSchedule *s) {
    for (int i = 0; i < s->n_actions; i++)
        if (s->actions[i].kind == PP_COMM && s->actions[i].n_msgs == 1 && s->actions[i].msgs[0].kind == PP_RECV_GRAD) {
            PpAction c = s->actions[i];
            memmove(&s->actions[1], &s->actions[0], (size_t)i * sizeof *s->actions);
            s->actions[0] = c;
            return;
        }
}

/* the last forward's micro-batch relabelled in its send */
static void relabel(PpSchedule *s) {
    for (int i = 0; i < s->n_actions; i++)
        for (int j = 0; j < s->actions[i].n_msgs; j++)
            if (s->actions[i].msgs[j].kind == PP_SEND_ACT && s->actions[i].msgs[j].mb == 1) {
                s->actions[i].msgs[j].mb = 2;
                return;
            }
}

/* the first received activation dropped from its step (a one-message step becomes empty: removed) */
static void drop_recv(PpSchedule *s) {
    for (int i = 0; i < s->n_actions; i++)
        if (s->actions[i].kind == PP_COMM && s->actions[i].msgs[0].kind == PP_RECV_ACT) {
            if (s->actions[i].n_msgs == 1) {
                memmove(&s->actions[i], &s->actions[i + 1], (size_t)(s->n_actions - i - 1) * sizeof *s->actions);
                s->n_actions--;
            } else {
                memmove(&s->actions[i].msgs[0], &s->actions[i].msgs[1], (size_t)(s->actions[i].n_msgs - 1) * sizeof(PpMsg));
                s->actions[i].n_msgs--;
            }
            return;
        }
}

/* backward of micro-batch 0 moved before its forward */
static void backward_first(PpSchedule *s) {
    for (int i = 0; i < s->n_actions; i++)
        if (s->actions[i].kind == PP_BACKWARD) {
            PpAction b = s->actions[i];
            memmove(&s->actions[1], &s->actions[0], (size_t)i * sizeof *s->actions);
            s->actions[0] = b;
            return;
        }
}

TEST(pp_checker_rejects_broken_schedules) {
    expect_broken(recv_grad_first, 0, "deadlock");
    expect_broken(relabel, 0, "sent as activation of micro-batch 2");
    expect_broken(drop_recv, 2, "before its input arrived");
    expect_broken(backward_first, 0, "before its forward");
    /* a bound tighter than 1F1B's min(P - p, M) */
    PpSchedule s[2];
    const PpSchedule *ptr[2];
    for (int i = 0; i < 2; i++) {
        REQUIRE_OK(pp_schedule_1f1b(&s[i], 2, 3, i));
        ptr[i] = &s[i];
    }
    char err[512];
    int tight[2] = {1, 1}, exact[2] = {2, 1};
    CHECK(!pp_schedule_check(ptr, tight, err, sizeof err) && strstr(err, "in flight"));
    CHECK_MSG(pp_schedule_check(ptr, exact, err, sizeof err), "%s", err);
    for (int i = 0; i < 2; i++) pp_schedule_free(&s[i]);
}

TEST(pp_blocks_over_chunks) {
    int first, count;
    /* 7 blocks over 2 stages × 2 chunks: global chunks 0..3 hold 1, 2, 2, 2 blocks */
    const int want_first[4] = {0, 1, 3, 5}, want_count[4] = {1, 2, 2, 2};
    for (int g = 0; g < 4; g++) {
        pp_chunk_blocks(7, 2, 2, g % 2, g / 2, &first, &count);
        CHECK_MSG(first == want_first[g] && count == want_count[g], "chunk %d: [%d, +%d)", g, first, count);
    }
    /* even split and the owner of every block, for many shapes */
    for (int L = 1; L <= 13; L++)
        for (int P = 1; P <= 4; P++)
            for (int V = 1; V <= 3; V++) {
                if (L < P * V) {
                    CHECK(pp_check_layers(L, P, V) == VFM_ERR_USAGE);
                    continue;
                }
                CHECK_OK(pp_check_layers(L, P, V));
                int next = 0;
                for (int g = 0; g < P * V; g++) {
                    pp_chunk_blocks(L, P, V, g % P, g / P, &first, &count);
                    CHECK(first == next && count >= L / (P * V) && count <= (L + P * V - 1) / (P * V));
                    for (int b = first; b < first + count; b++) {
                        int st, ch;
                        pp_block_owner(L, P, V, b, &st, &ch);
                        CHECK_MSG(st == g % P && ch == g / P, "L=%d P=%d V=%d block %d: stage %d chunk %d, want %d %d", L, P,
                                  V, b, st, ch, g % P, g / P);
                    }
                    next = first + count;
                }
                CHECK(next == L);
            }
    CHECK(pp_check_layers(3, 2, 2) == VFM_ERR_USAGE);
    CHECK(strstr(vfm_last_error(), "model.num_layers = 3") != NULL);
}

TEST(pp_stage_tables) {
    /* patch embedder, two conditioning entries (REDUCE_PP), 5 blocks of 2 entries, final layer */
    ParamTable t;
    param_table_init(&t);
    param_table_add(&t, INIT_NORMAL, 0.1f, 2, (int64_t[]){4, 3}, 0, -1, "x_embedder.weight");
    param_table_add(&t, INIT_NORMAL, 0.1f, 2, (int64_t[]){4, 2}, REDUCE_PP, -1, "t_embedder.weight");
    param_table_add(&t, INIT_ONE, 0, 1, (int64_t[]){4}, REDUCE_PP, -1, "cond_norm.weight");
    int block_first[5];
    for (int l = 0; l < 5; l++) {
        block_first[l] = param_table_add(&t, INIT_NORMAL, 0.1f, 2, (int64_t[]){4, 4}, 0, 0, "blocks.%d.w", l);
        param_table_add(&t, INIT_ZERO, 0, 1, (int64_t[]){4}, 0, 0, "blocks.%d.b", l);
    }
    int head = param_table_add(&t, INIT_NORMAL, 0.1f, 2, (int64_t[]){3, 4}, 0, -1, "final.weight");
    PpBlocks b = {block_first, 5, head};
    /* P = 2, V = 2: global chunks hold blocks {0}, {1}, {2}, {3, 4}: stage 0 has chunks 0 and 2
     * (blocks 0, 2), stage 1 chunks 1 and 3 (blocks 1, 3, 4) */
    const char *want[2] = {"x_embedder.weight t_embedder.weight cond_norm.weight blocks.0.w blocks.0.b blocks.2.w blocks.2.b",
                           "t_embedder.weight cond_norm.weight blocks.1.w blocks.1.b blocks.3.w blocks.3.b blocks.4.w "
                           "blocks.4.b final.weight"};
    const int want_blocks[2][3] = {{0, 2, -1}, {1, 3, 4}};
    for (int p = 0; p < 2; p++) {
        PpStageMap m;
        REQUIRE_OK(pp_stage_map_init(&m, &t, &b, 2, 2, p));
        char names[1024] = "";
        for (int i = 0; i < m.local.count; i++) {
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? " " : "", m.local.entries[i].name);
            CHECK(strcmp(m.local.entries[i].name, t.entries[m.full_entry[i]].name) == 0);
            CHECK(m.local.entries[i].reduce_groups == t.entries[m.full_entry[i]].reduce_groups);
        }
        CHECK_MSG(strcmp(names, want[p]) == 0, "stage %d: %s", p, names);
        CHECK(m.n_blocks == (p == 0 ? 2 : 3));
        for (int k = 0; k < m.n_blocks; k++) {
            CHECK(m.block_index[k] == want_blocks[p][k]);
            CHECK(strncmp(m.local.entries[m.block_first[k]].name, "blocks.", 7) == 0);
        }
        CHECK(m.head_first == (p == 0 ? m.local.count : m.local.count - 1));
        int64_t at = 0;
        for (int i = 0; i < m.local.count; i++) {
            CHECK(m.local.entries[i].offset == at);
            at += m.local.entries[i].numel;
        }
        CHECK(m.local.total == at);
        pp_stage_map_free(&m);
    }
    CHECK(pp_entry_stage(&t, &b, 2, 2, 1) == -1);
    CHECK(pp_entry_stage(&t, &b, 2, 2, 0) == 0);
    CHECK(pp_entry_stage(&t, &b, 2, 2, head) == 1);
    param_table_free(&t);
}
