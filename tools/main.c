#include <stdio.h>
#include "gemtrain/common.h"
int main(void) { printf("gemtrain %s\n", gt_version()); return 0; }
