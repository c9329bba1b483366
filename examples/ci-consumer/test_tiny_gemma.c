/* Train a 2-layer gemma3-tiny for 20 steps in a unit test and check that it learned. */
#include <check.h>
#include <gemtrain/gemtrain.h>

START_TEST(test_tiny_gemma_learns) {
  gt_ctx *c = gt_ctx_new();
  const char *ov[] = {"dataset_type=synthetic", "base_num_decoder_layers=2", "layer_pattern=LG",
                      "learning_rate=0.01", "max_target_length=32"};
  ck_assert_msg(gt_ctx_configure(c, "gemma3-tiny", 5, ov) == GT_OK, "%s", gt_ctx_error(c));
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
