/* The OpenSHMEM conformance suite: contexts and teams. */
#include "conformance.h"

/* --------------------------------------------------------------- contexts */

void test_contexts(void) {
  shmem_ctx_t ctx = SHMEM_CTX_INVALID, ctx2 = SHMEM_CTX_INVALID;
  shmem_team_t team = SHMEM_TEAM_INVALID;
  long *data = (long *)pool_a, *flag = (long *)pool_b, *flag2 = (long *)pool_b + 1, src[256], r, got[4];
  int i, rc;

  section("contexts");
  CHECK(shmem_ctx_get_team(SHMEM_CTX_DEFAULT, &team) == 0 && team == SHMEM_TEAM_WORLD,
        "shmem_ctx_get_team(SHMEM_CTX_DEFAULT)");
  rc = shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx);
  CHECK(rc == 0 && ctx != SHMEM_CTX_INVALID, "shmem_ctx_create(PRIVATE) = %d", rc);
  rc = shmem_ctx_create(SHMEM_CTX_SERIALIZED | SHMEM_CTX_NOSTORE, &ctx2);
  CHECK(rc == 0 && ctx2 != SHMEM_CTX_INVALID && ctx2 != ctx, "shmem_ctx_create(SERIALIZED|NOSTORE) = %d", rc);
  team = SHMEM_TEAM_INVALID;
  CHECK(shmem_ctx_get_team(ctx, &team) == 0 && team == SHMEM_TEAM_WORLD, "shmem_ctx_get_team(created ctx)");
  *flag = *flag2 = 0;
  data[300] = 0;
  for (i = 0; i < 256; i++) src[i] = me * 1000 + i;
  shmem_barrier_all();

  /* a context's quiet completes its puts: the flag (on the default context) comes after the data */
  shmem_ctx_long_put_nbi(ctx, data, src, 256, right_pe);
  shmem_ctx_quiet(ctx);
  shmem_long_atomic_set(flag, 1, right_pe);
  shmem_long_wait_until(flag, SHMEM_CMP_EQ, 1);
  for (i = 0; i < 256; i++) CHECK(data[i] == left_pe * 1000 + i, "ctx put_nbi + ctx_quiet: [%d] = %ld", i, data[i]);
  /* a context's quiet completes its puts to every PE it put to (pool_b's count, on the default context, after) */
  {
    long *count = (long *)pool_b + 8, *block = data + 1024;
    int pe;
    *count = 0;
    shmem_barrier_all();
    for (pe = 0; pe < npes; pe++)
      if (pe != me) shmem_ctx_long_put_nbi(ctx2, block + 64 * me, src, 64, pe);
    shmem_ctx_quiet(ctx2);
    for (pe = 0; pe < npes; pe++)
      if (pe != me) shmem_long_atomic_add(count, 1, pe);
    shmem_long_wait_until(count, SHMEM_CMP_EQ, npes - 1);
    for (pe = 0; pe < npes; pe++)
      for (i = 0; pe != me && i < 64; i++)
        CHECK(block[64 * pe + i] == pe * 1000 + i, "ctx put_nbi to every PE + ctx_quiet: PE %d's [%d] = %ld", pe, i,
              block[64 * pe + i]);
    shmem_barrier_all();
  }
  /* a context's fence orders its puts */
  shmem_ctx_long_put(ctx, data + 256, src, 16, right_pe);
  shmem_ctx_fence(ctx);
  shmem_ctx_long_p(ctx, flag2, 2, right_pe);
  shmem_long_wait_until(flag2, SHMEM_CMP_EQ, 2);
  for (i = 0; i < 16; i++)
    CHECK(data[256 + i] == left_pe * 1000 + i, "ctx put + ctx_fence + ctx p: [%d] = %ld", i, data[256 + i]);
  /* get, g, atomics on both contexts */
  shmem_ctx_long_get(ctx, got, data, 4, right_pe);
  for (i = 0; i < 4; i++) CHECK(got[i] == me * 1000 + i, "ctx get: [%d] = %ld", i, got[i]);
  r = shmem_ctx_long_g(ctx2, &data[3], right_pe);
  CHECK(r == me * 1000 + 3, "ctx g: %ld", r);
  r = shmem_ctx_long_atomic_fetch_add(ctx, &data[300], 5, right_pe);
  CHECK(r == 0, "ctx fetch_add: %ld", r);
  shmem_ctx_long_atomic_add(ctx2, &data[300], 7, right_pe);
  shmem_ctx_quiet(ctx2);
  r = shmem_ctx_long_atomic_fetch(ctx, &data[300], right_pe);
  CHECK(r == 12, "two contexts' atomics: %ld", r);
  shmem_ctx_putmem_nbi(ctx2, data + 320, src, 8 * sizeof(long), right_pe);
  shmem_ctx_quiet(ctx2);
  shmem_barrier_all();
  CHECK(data[300] == 12, "contexts' atomics left %ld", data[300]);
  for (i = 0; i < 8; i++) CHECK(data[320 + i] == left_pe * 1000 + i, "ctx putmem_nbi: [%d]", i);
  shmem_ctx_destroy(ctx);
  shmem_ctx_destroy(ctx2);
  shmem_barrier_all();
  *flag = *flag2 = 0;
}

/* ------------------------------------------------------------------ teams */

shmem_team_t team_even = SHMEM_TEAM_INVALID, team_x = SHMEM_TEAM_INVALID, team_y = SHMEM_TEAM_INVALID;

void test_teams(void) {
  shmem_team_config_t conf, got_conf;
  shmem_team_t sub = SHMEM_TEAM_INVALID, t;
  int sme, sn, i, rc, neven = (npes + 1) / 2;
  long *box = (long *)pool_b;

  section("teams: world, shared, invalid");
  CHECK(shmem_team_my_pe(SHMEM_TEAM_WORLD) == me, "shmem_team_my_pe(WORLD) = %d", shmem_team_my_pe(SHMEM_TEAM_WORLD));
  CHECK(shmem_team_n_pes(SHMEM_TEAM_WORLD) == npes, "shmem_team_n_pes(WORLD) = %d", shmem_team_n_pes(SHMEM_TEAM_WORLD));
  CHECK(shmem_team_my_pe(SHMEM_TEAM_INVALID) == -1, "shmem_team_my_pe(INVALID)");
  CHECK(shmem_team_n_pes(SHMEM_TEAM_INVALID) == -1, "shmem_team_n_pes(INVALID)");
  CHECK(shmem_team_translate_pe(SHMEM_TEAM_INVALID, 0, SHMEM_TEAM_WORLD) == -1, "translate from INVALID");
  CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, 0, SHMEM_TEAM_INVALID) == -1, "translate into INVALID");
  CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, npes, SHMEM_TEAM_WORLD) == -1, "translate of PE n_pes");
  for (i = 0; i < npes; i++)
    CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, i, SHMEM_TEAM_WORLD) == i, "translate WORLD -> WORLD of %d", i);
  sme = shmem_team_my_pe(SHMEM_TEAM_SHARED);
  sn = shmem_team_n_pes(SHMEM_TEAM_SHARED);
  CHECK(sn >= 1 && sn <= npes && sme >= 0 && sme < sn, "SHMEM_TEAM_SHARED: PE %d of %d", sme, sn);
  CHECK(shmem_team_translate_pe(SHMEM_TEAM_SHARED, sme, SHMEM_TEAM_WORLD) == me, "translate SHARED -> WORLD of me");
  for (i = 0; i < sn; i++) {
    int w = shmem_team_translate_pe(SHMEM_TEAM_SHARED, i, SHMEM_TEAM_WORLD);
    CHECK(w >= 0 && w < npes, "translate SHARED %d -> WORLD = %d", i, w);
    CHECK(shmem_ptr(pool_a, w) != NULL, "shmem_ptr(heap, %d) is NULL for a member of SHMEM_TEAM_SHARED", w);
  }
  CHECK(shmem_team_sync(SHMEM_TEAM_SHARED) == 0, "shmem_team_sync(SHARED)");

  section("teams: split_strided (the even PEs)");
  conf.num_contexts = 2;
  rc = shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, neven, &conf, SHMEM_TEAM_NUM_CONTEXTS, &team_even);
  if (me % 2 == 0) {
    CHECK(rc == 0 && team_even != SHMEM_TEAM_INVALID, "split_strided(0, 2, %d) = %d", neven, rc);
    CHECK(shmem_team_my_pe(team_even) == me / 2, "team_my_pe(even) = %d", shmem_team_my_pe(team_even));
    CHECK(shmem_team_n_pes(team_even) == neven, "team_n_pes(even) = %d", shmem_team_n_pes(team_even));
    for (i = 0; i < neven; i++)
      CHECK(shmem_team_translate_pe(team_even, i, SHMEM_TEAM_WORLD) == 2 * i, "translate even %d -> WORLD = %d", i,
            shmem_team_translate_pe(team_even, i, SHMEM_TEAM_WORLD));
    CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, me, team_even) == me / 2, "translate WORLD -> even of me");
    CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, 1, team_even) == -1, "translate of PE 1 (odd) into even");
    CHECK(shmem_team_translate_pe(team_even, neven, SHMEM_TEAM_WORLD) == -1, "translate of even PE n_pes");
    got_conf.num_contexts = -1;
    CHECK(shmem_team_get_config(team_even, SHMEM_TEAM_NUM_CONTEXTS, &got_conf) == 0 && got_conf.num_contexts == 2,
          "shmem_team_get_config: num_contexts %d", got_conf.num_contexts);
    CHECK(shmem_team_sync(team_even) == 0, "shmem_team_sync(even)");
  } else {
    CHECK(team_even == SHMEM_TEAM_INVALID, "split_strided gave an odd PE a team");
    CHECK(shmem_team_my_pe(team_even) == -1, "team_my_pe of a team I am not in");
  }

  section("teams: split_2d (xrange 2)");
  rc = shmem_team_split_2d(SHMEM_TEAM_WORLD, 2, NULL, 0, &team_x, NULL, 0, &team_y);
  CHECK(rc == 0 && team_x != SHMEM_TEAM_INVALID && team_y != SHMEM_TEAM_INVALID, "split_2d = %d", rc);
  CHECK(shmem_team_my_pe(team_x) == me % 2, "x team: my_pe %d", shmem_team_my_pe(team_x));
  CHECK(shmem_team_n_pes(team_x) == ((me / 2) * 2 + 1 < npes ? 2 : 1), "x team: n_pes %d", shmem_team_n_pes(team_x));
  CHECK(shmem_team_my_pe(team_y) == me / 2, "y team: my_pe %d", shmem_team_my_pe(team_y));
  CHECK(shmem_team_n_pes(team_y) == (npes - me % 2 + 1) / 2, "y team: n_pes %d", shmem_team_n_pes(team_y));
  CHECK(shmem_team_translate_pe(team_x, 0, SHMEM_TEAM_WORLD) == me - me % 2, "x team: translate 0 -> WORLD");
  CHECK(shmem_team_translate_pe(team_y, 0, SHMEM_TEAM_WORLD) == me % 2, "y team: translate 0 -> WORLD");
  CHECK(shmem_team_translate_pe(team_x, shmem_team_my_pe(team_x), team_y) == me / 2, "translate x -> y of me");
  /* quiet + team_sync: the x partner's put is visible */
  box[0] = 0;
  shmem_barrier_all();
  if (shmem_team_n_pes(team_x) == 2) {
    int partner = shmem_team_translate_pe(team_x, 1 - me % 2, SHMEM_TEAM_WORLD);
    shmem_long_p(box, 500 + me, partner);
    shmem_quiet();
    CHECK(shmem_team_sync(team_x) == 0, "shmem_team_sync(x)");
    CHECK(box[0] == 500 + partner, "quiet + team_sync(x): %ld", box[0]);
  }
  CHECK(shmem_team_sync(team_y) == 0, "shmem_team_sync(y)");
  /* a split of a split: the first PE of each y team alone */
  rc = shmem_team_split_strided(team_y, 0, 1, 1, NULL, 0, &sub);
  if (me / 2 == 0) {
    CHECK(rc == 0 && sub != SHMEM_TEAM_INVALID && shmem_team_n_pes(sub) == 1 && shmem_team_my_pe(sub) == 0,
          "split of the y team = %d", rc);
    CHECK(shmem_team_translate_pe(sub, 0, SHMEM_TEAM_WORLD) == me, "translate sub -> WORLD");
    shmem_team_destroy(sub);
  } else {
    CHECK(sub == SHMEM_TEAM_INVALID, "split of the y team gave a team to a PE outside it");
  }

  section("teams: a team's context (team-relative PEs)");
  box[1] = 0;
  shmem_barrier_all();
  if (team_even != SHMEM_TEAM_INVALID) {
    shmem_ctx_t tctx = SHMEM_CTX_INVALID;
    int tme = shmem_team_my_pe(team_even), tn = shmem_team_n_pes(team_even);
    int from = (tme - 1 + tn) % tn;
    rc = shmem_team_create_ctx(team_even, 0, &tctx);
    CHECK(rc == 0 && tctx != SHMEM_CTX_INVALID, "shmem_team_create_ctx(even) = %d", rc);
    t = SHMEM_TEAM_INVALID;
    CHECK(shmem_ctx_get_team(tctx, &t) == 0 && t == team_even, "shmem_ctx_get_team of a team's context");
    shmem_ctx_long_p(tctx, &box[1], 900 + me, (tme + 1) % tn);
    shmem_ctx_quiet(tctx);
    CHECK(shmem_team_sync(team_even) == 0, "team_sync(even)");
    CHECK(box[1] == 900 + 2 * from, "a put on the even team's context to team PE %d landed as %ld, want %d",
          (tme + 1) % tn, box[1], 900 + 2 * from);
    CHECK(shmem_ctx_long_g(tctx, &box[1], from) == 900 + 2 * ((from - 1 + tn) % tn), "g on the team's context");
    shmem_ctx_destroy(tctx);
  }
}
