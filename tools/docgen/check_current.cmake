# Run by ctest (docs_configuration_current): generates the configuration
# reference into OUT and fails when it differs from the committed DOC.
execute_process(COMMAND ${GEN} ${CONFIGS} ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gemtrain_docgen failed (exit ${rc}) writing ${OUT}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT} ${DOC} RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "${DOC} is not what the key table and configs/base.json give (see ${OUT}); "
                      "run `cmake --build build --target docs` and commit docs/configuration.md")
endif()
