package jetstream

import "encoding/json"

// A Codec turns payloads into message bodies and back. A [Consumer] decodes
// each message into a new value of its type T with Unmarshal(data, &v); a
// [Publisher] encodes each item with Marshal(item). A Codec must be safe for
// concurrent use. [JSON] is the default; [WithCodec] sets another.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSON is the default [Codec]: [encoding/json].
type JSON struct{}

// Marshal encodes v with [json.Marshal].
func (JSON) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes data with [json.Unmarshal].
func (JSON) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Bytes is a [Codec] for payloads that are already bytes: []byte or string
// values are sent as they are, and a message body is copied into a *[]byte
// or *string. Other types, and nil pointers, are an error wrapping
// [crew.ErrInvalid].
type Bytes struct{}

// Marshal returns v itself if it is a []byte, or its bytes if it is a string.
// Other types are an error wrapping [crew.ErrInvalid].
func (Bytes) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case []byte:
		return v, nil
	case string:
		return []byte(v), nil
	}
	return nil, invalid("Bytes: cannot encode %T", v)
}

// Unmarshal copies data into v, which must be a non-nil *[]byte or *string;
// anything else is an error wrapping [crew.ErrInvalid].
func (Bytes) Unmarshal(data []byte, v any) error {
	switch v := v.(type) {
	case *[]byte:
		if v == nil {
			return invalid("Bytes: cannot decode into a nil *[]byte")
		}
		*v = append([]byte(nil), data...)
		return nil
	case *string:
		if v == nil {
			return invalid("Bytes: cannot decode into a nil *string")
		}
		*v = string(data)
		return nil
	}
	return invalid("Bytes: cannot decode into %T", v)
}
