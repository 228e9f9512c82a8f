#include "serving/rest_json.h"

#include <bit>
#include <stdexcept>

namespace flow::serving {
namespace {

using nlohmann::json;
using Kind = JsonData::Kind;

// nlohmann's SAX events to a DOM, except inside inputs[i].data, whose leaves go to a JsonData.
class RequestReader {
 public:
  explicit RequestReader(RequestJson& out) : out_(out) {}

  bool null() { return data_ ? leaf(Kind::kNull, 0) : value(json()); }
  bool boolean(bool flag) { return data_ ? leaf(Kind::kBool, flag) : value(json(flag)); }
  bool number_integer(json::number_integer_t number) {
    return data_ ? leaf(Kind::kInteger, static_cast<uint64_t>(number)) : value(json(number));
  }
  bool number_unsigned(json::number_unsigned_t number) { return data_ ? leaf(Kind::kUnsigned, number) : value(json(number)); }
  bool number_float(json::number_float_t number, const std::string&) {
    return data_ ? leaf(Kind::kFloat, std::bit_cast<uint64_t>(number)) : value(json(number));
  }
  bool string(std::string& text) { return data_ ? leaf(Kind::kString, 0) : value(json(std::move(text))); }
  bool binary(json::binary_t&) { return false; }  // not in JSON text

  bool start_object(std::size_t) {
    if (data_) {
      // A leaf of data that is an object: an error later, for the value's position; its
      // contents are skipped.
      leaf(Kind::kObject, 0);
      ++skipped_objects_;
      return true;
    }
    open(json::object());
    return true;
  }
  bool end_object() {
    if (data_) {
      --skipped_objects_;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool key(std::string& name) {
    if (data_) return true;
    if (name == "data" && in_input_object() && stack_.back()->contains("data")) {
      throw std::invalid_argument("an input has two data fields");
    }
    key_ = std::move(name);
    return true;
  }

  bool start_array(std::size_t) {
    if (data_) {
      if (skipped_objects_ == 0) data_->depth = std::max(data_->depth, ++data_depth_);
      return true;
    }
    if (in_input_object() && key_ == "data") {
      (*stack_.back())["data"] = nullptr;
      data_ = &out_.data[inputs_->size() - 1];
      *data_ = JsonData{};
      data_depth_ = data_->depth = 1;
      return true;
    }
    json* array = open(json::array());
    if (stack_.size() == 2 && stack_[0]->is_object() && parent_key_ == "inputs") {
      inputs_ = array;
      out_.data.clear();  // a repeated "inputs" key: the DOM keeps the last array, and only its data
    }
    return true;
  }
  bool end_array() {
    if (data_) {
      if (skipped_objects_ == 0 && --data_depth_ == 0) data_ = nullptr;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  template <typename Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& error) {
    throw error;
  }

 private:
  // Whether the innermost open value is an object in the top-level inputs array.
  bool in_input_object() const {
    return inputs_ && stack_.size() == 3 && stack_[1] == inputs_ && stack_.back()->is_object();
  }

  bool leaf(Kind kind, uint64_t bits) {
    if (skipped_objects_ > 0) return true;
    data_->kinds.push_back(kind);
    data_->values.push_back(bits);
    return true;
  }

  // Adds `element` to the innermost open array or object (or makes it the root); returns it.
  json* place(json&& element) {
    if (stack_.empty()) {
      out_.header = std::move(element);
      return &out_.header;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(element));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(element);
    return &slot;
  }
  bool value(json&& element) {
    place(std::move(element));
    return true;
  }
  json* open(json&& container) {
    parent_key_ = stack_.size() == 1 ? key_ : std::string();
    json* placed = place(std::move(container));
    stack_.push_back(placed);
    return placed;
  }

  RequestJson& out_;
  std::vector<json*> stack_;  // the arrays and objects open, outermost first
  std::string key_;           // the last key read in the innermost object
  std::string parent_key_;    // the root's key of the container just opened
  json* inputs_ = nullptr;    // the root's inputs array, once open
  JsonData* data_ = nullptr;  // the data array being read, if any
  size_t data_depth_ = 0;
  size_t skipped_objects_ = 0;
};

}  // namespace

double JsonData::floating(size_t i) const {
  switch (kinds[i]) {
    case Kind::kInteger: return static_cast<double>(integer(i));
    case Kind::kUnsigned: return static_cast<double>(unsigned_integer(i));
    default: return std::bit_cast<double>(values[i]);
  }
}

std::string JsonData::describe(size_t i) const {
  switch (kinds[i]) {
    case Kind::kInteger: return std::to_string(integer(i));
    case Kind::kUnsigned: return std::to_string(unsigned_integer(i));
    case Kind::kFloat: return json(floating(i)).dump();
    case Kind::kBool: return "a JSON boolean";
    case Kind::kNull: return "a JSON null";
    case Kind::kString: return "a JSON string";
    case Kind::kObject: return "a JSON object";
  }
  return "a JSON value";
}

RequestJson parse_request_json(std::string_view text) {
  RequestJson out;
  RequestReader reader(out);
  json::sax_parse(text.begin(), text.end(), &reader);
  return out;
}

}  // namespace flow::serving
