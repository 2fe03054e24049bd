# The layer rule, enforced by the build: kernels < models < actors <
# transport < scheduler/runtime < scheduler/app. Each layer's target exposes
# only its own folder's headers, through a folder of its own in the build
# tree (layers/<target>/<folder> -> the source folder), and links only the
# layers below it. An include of a layer above is then "No such file or
# directory" when the including layer is compiled. tests/check_layers.sh
# states the same rule for every file, with a clear message.
function(gradwire_layer_headers target folder)
  set(root ${PROJECT_BINARY_DIR}/layers/${target})
  get_filename_component(parent ${root}/${folder} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  if(NOT EXISTS ${root}/${folder})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  target_include_directories(${target} PUBLIC ${root})
endfunction()
