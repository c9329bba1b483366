/* Train a 2-layer gemma3-tiny for 20 steps in a unit test and check that it
 * learned; read and set configuration keys by name. */
#include <check.h>
#include <gemtrain/gemtrain.h>
#include <string.h>

START_TEST(test_tiny_gemma_learns) {
  gt_ctx *c = gt_ctx_new();
  const char *ov[] = {"dataset_type=synthetic", "base_num_decoder_layers=2", "layer_pattern=LG",
                      "max_target_length=32"};
  ck_assert_msg(gt_ctx_configure(c, "gemma3-tiny", 4, ov) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert_msg(gt_ctx_set(c, "learning_rate", "0.01") == GT_OK, "%s", gt_ctx_error(c));
  char lr[32];
  int64_t layers;
  ck_assert(gt_ctx_get(c, "learning_rate", lr, sizeof lr) == GT_OK);
  ck_assert_str_eq(lr, "0.01");
  ck_assert(gt_ctx_get_int(c, "base_num_decoder_layers", &layers) == GT_OK && layers == 2);
  /* a refused value names the key and the value */
  ck_assert_int_eq(gt_ctx_set(c, "learning_rate", "fast"), GT_ERR_CONFIG);
  ck_assert_msg(strstr(gt_ctx_error(c), "learning_rate") && strstr(gt_ctx_error(c), "fast"), "%s", gt_ctx_error(c));
  ck_assert_msg(gt_ctx_init(c) == GT_OK, "%s", gt_ctx_error(c));
  double loss[20];
  ck_assert_msg(gt_ctx_train(c, 20, loss) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert_msg(loss[19] < 0.8 * loss[0], "loss %.3f -> %.3f", loss[0], loss[19]);
  gt_ctx_free(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("consumer");
  TCase *tc = tcase_create("core");
  /* Check's default is 4 s; a shared CI machine can be slower than that */
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_tiny_gemma_learns);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
